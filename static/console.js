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
