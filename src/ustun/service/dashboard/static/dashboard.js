// The page's Content-Security-Policy allows no inline script: behaviour lives here.

// A filter <select data-autosubmit> applies as soon as it changes.
document.addEventListener("change", (event) => {
  if (event.target.matches("select[data-autosubmit]")) event.target.form.submit();
});

// Live job progress: follow the dashboard's SSE stream of a job and update its page; reload
// once it has finished, so the result link (or the error) appears.
document.addEventListener("DOMContentLoaded", () => {
  const live = document.querySelector("[data-job-stream]");
  if (!live) return;
  const source = new EventSource(live.dataset.jobStream);
  const show = (message) => {
    const job = JSON.parse(message.data);
    live.querySelector("progress").value = job.progress;
    live.querySelector("[data-field=progress]").textContent = `${job.progress} %`;
    live.querySelector("[data-field=status]").textContent = job.status;
    if (["done", "failed", "cancelled"].includes(job.status)) {
      source.close();
      window.location.reload();
    }
  };
  source.addEventListener("status", show);
  source.addEventListener("progress", show);
});

// A <button data-copy="#id"> copies that element's text (a one-time secret). The clipboard API
// needs a secure context (https, localhost); elsewhere select the text and use the copy command.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
  } catch {
    const range = document.createRange();
    range.selectNodeContents(source);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    document.execCommand("copy");
  }
  button.textContent = "Copied";
});
