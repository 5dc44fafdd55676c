"""A vLLM replica's `/metrics` page as vLLM 0.32 writes it, for the endpoint picker's tests."""

MODEL = 'model_name="Qwen/Qwen2.5-0.5B-Instruct"'
# vllm:cache_config_info as vLLM 0.32 writes it: every CacheConfig field a label, the gauge set to 1.
CACHE_LABELS = (
    '_block_size_resolved="True",block_size="16",cache_dtype="auto",cache_hit_alignment_tokens="None",'
    'effective_attention_block_size="None",enable_mamba_shared_prefix_checkpoint="False",'
    'enable_prefix_caching="True",engine="{engine}",gpu_memory_utilization="0.92",hash_block_size="None",'
    'is_attention_free="False",kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",'
    'kv_cache_max_concurrency="None",kv_cache_memory_bytes="None",kv_cache_size_tokens="None",'
    'kv_offloading_backend="native",kv_offloading_size="None",kv_sharing_fast_prefill="False",'
    'mamba_block_size="None",mamba_cache_dtype="auto",mamba_cache_mode="none",mamba_page_size_padded="None",'
    'mamba_ssm_cache_dtype="auto",num_cpu_blocks="None",num_gpu_blocks="{blocks}",num_gpu_blocks_override="None",'
    'prefix_cache_retention_interval="0",prefix_caching_hash_algo="sha256",prefix_match_unit="None",'
    'replayssm_buffer_len="16",skip_page_size_padded="None",sliding_window="None",swa_bounded_replay="True",'
    'use_kda_recoverssm="False",use_replayssm="False",user_specified_block_size="True"'
)


def vllm_metrics(
    running=(3, 2), waiting=(1, 0), kv=(0.25, 0.75), queries=(1000.0, 500.0), hits=(600.0, 150.0), blocks=2048
):
    """A /metrics page in prometheus_client's exposition, one sample per engine of the server."""
    engines = range(len(running))

    def family(name, kind, help_, values):
        lines = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        lines += [f'{name}{{engine="{e}",{MODEL}}} {float(values[e])!r}' for e in engines]
        return lines

    lines = [
        *family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running),
        *family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting),
        *[f'vllm:num_requests_waiting_by_reason{{engine="{e}",{MODEL},reason="capacity"}} 7.0' for e in engines],
        *family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", kv),
        *family("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries.", queries),
        *family("vllm:prefix_cache_queries_created", "gauge", "Prefix cache queries.", [1.7961057915718188e09] * 2),
        *family("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits.", hits),
        *family("vllm:prefix_cache_hits_created", "gauge", "Prefix cache hits.", [1.7961057915718434e09] * 2),
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        *["vllm:cache_config_info{" + CACHE_LABELS.format(engine=e, blocks=blocks) + "} 1.0" for e in engines],
    ]
    return "\n".join(lines) + "\n"
