// Live job progress: follow the dashboard's SSE stream of a job and update its page.
document.addEventListener("DOMContentLoaded", () => {
  const live = document.querySelector("[data-job-stream]");
  if (!live) return;
  const source = new EventSource(live.dataset.jobStream);
  source.onmessage = (message) => {
    const job = JSON.parse(message.data);
    live.querySelector("progress").value = job.progress ?? 0;
    live.querySelector("[data-field=progress]").textContent = `${job.progress ?? 0} %`;
    live.querySelector("[data-field=status]").textContent = job.status;
    if (["done", "failed", "cancelled"].includes(job.status)) source.close();
  };
});
