// detafs web page: the little it does beyond links and forms.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // "Copy" buttons copy the address beside them.
  for (const button of document.querySelectorAll(".copy-button")) {
    button.addEventListener("click", async () => {
      const code = button.previousElementSibling;
      try {
        await navigator.clipboard.writeText(code.textContent);
        button.textContent = "Copied";
      } catch {
        const range = document.createRange();
        range.selectNodeContents(code);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        button.textContent = "Selected: press Ctrl+C";
      }
    });
  }
});
