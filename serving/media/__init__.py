"""Media loaders, one per modality: each reads its medium's bytes (base64 or a fetched URL), probes the header
(`probe`: image size, audio duration) and decodes it once (`load_bytes`); `fetch` guards URL fetching."""
