// Behaviour every console page shares, kept out of the markup: the content security policy allows no inline
// script, no inline event handler and no evaluated htmx expression.
(function () {
  // Polling elements (`hx-trigger="every 5s" data-poll-while-visible`) skip their requests while the tab is
  // hidden; htmx keeps the timer running, so polling resumes by itself when the tab is shown again.
  document.addEventListener("htmx:confirm", (event) => {
    const source = event.detail && event.detail.elt;
    if (document.visibilityState !== "visible" && source && source.hasAttribute("data-poll-while-visible")) {
      event.preventDefault();
    }
  });
})();

// Write actions answer with `HX-Trigger: {"tessera:toast": {"message": ...}}`: the message is shown in the page's
// toast, as a new element each time so that its fade-out starts again.
(function () {
  document.addEventListener("tessera:toast", (event) => {
    const toast = document.getElementById("toast");
    const message = event.detail && event.detail.message;
    if (!toast || typeof message !== "string") return;
    const p = document.createElement("p");
    p.className = "toast-message toast-ok";
    p.textContent = message;
    toast.replaceChildren(p);
  });
})();
