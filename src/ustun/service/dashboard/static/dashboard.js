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
