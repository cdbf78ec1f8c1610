// The dashboard page: live queue and workers (polled), and aggregates over a time window.
import {
  AuthError, OUTCOME_COLOURS, clearError, el, formatNumber, formatSpeedup, formatTime, getJson, jobLink,
  outcomeBadge, outcomeColour, showError, showSession, signIn,
} from "./api.js";

const LIVE_EVERY_MS = 3000;
const AGGREGATES_EVERY_MS = 30000;
const QUEUE_HISTORY_POINTS = 100;

Chart.defaults.animation = false;
Chart.defaults.maintainAspectRatio = false;

const charts = {};

function makeCharts() {
  charts.queue = new Chart(document.getElementById("queue-chart"), {
    type: "line",
    data: { labels: [], datasets: [
      { label: "queued", data: [], borderColor: "#5c6bc0", backgroundColor: "#5c6bc0" },
      { label: "running", data: [], borderColor: "#2e9d4f", backgroundColor: "#2e9d4f" },
    ] },
    options: { plugins: { title: { display: true, text: "Queue depth (since this page opened)" } },
               scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
  });
  charts.devices = new Chart(document.getElementById("devices-chart"), {
    type: "bar",
    data: { labels: [], datasets: [
      { label: "busy", data: [], backgroundColor: "#2e9d4f" },
      { label: "idle", data: [], backgroundColor: "#cfd8dc" },
    ] },
    options: { plugins: { title: { display: true, text: "Workers per GPU" } },
               scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } } },
  });
  charts.outcomes = new Chart(document.getElementById("outcomes-chart"), {
    type: "bar",
    data: { labels: [], datasets: [] },
    options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 },
                                                    title: { display: true, text: "jobs finished" } } } },
  });
  charts.speedups = new Chart(document.getElementById("speedups-chart"), {
    type: "bar",
    data: { labels: [], datasets: [
      { label: "min–max", data: [], backgroundColor: "#90a4ae", barPercentage: 0.06, grouped: false, order: 3 },
      { label: "p25–p75", data: [], backgroundColor: "#7986cb", barPercentage: 0.5, grouped: false, order: 2 },
      { label: "median", data: [], type: "line", showLine: false, pointRadius: 6, pointStyle: "rectRot",
        backgroundColor: "#1a237e", borderColor: "#1a237e", order: 1 },
    ] },
    options: { scales: { y: { title: { display: true }, ticks: { callback: speedupTick } } },
               plugins: { tooltip: { callbacks: { afterBody: speedupTooltip } } } },
  });
  charts.rules = new Chart(document.getElementById("rules-chart"), {
    type: "bar",
    data: { labels: [], datasets: [{ label: "jobs", data: [], backgroundColor: [] }] },
    options: { indexAxis: "y", plugins: { legend: { display: false } },
               scales: { x: { beginAtZero: true, ticks: { precision: 0 }, title: { display: true, text: "jobs" } } } },
  });
  charts.stages = new Chart(document.getElementById("stages-chart"), {
    type: "bar",
    data: { labels: [], datasets: [
      { label: "median", data: [], backgroundColor: "#7986cb" },
      { label: "p95", data: [], backgroundColor: "#e8912d" },
      { label: "max", data: [], backgroundColor: "#d64545" },
    ] },
    options: { indexAxis: "y", scales: { x: { beginAtZero: true, title: { display: true, text: "seconds" } } } },
  });
}

let speedupRows = [];

// Chart.js calls this with the scale as `this`; a log axis labels only 1, 2 and 5 × 10^k.
function speedupTick(value) {
  if (this.type === "logarithmic") {
    const mantissa = Math.round(value / 10 ** Math.floor(Math.log10(value)));
    if (![1, 2, 5].includes(mantissa)) return "";
  }
  return formatSpeedup(value);
}

function speedupTooltip(items) {
  const row = speedupRows[items[0].dataIndex];
  return row ? `${row.count} jobs; median ${formatSpeedup(row.median)}` : "";
}

function fillTable(id, rows) {
  document.querySelector(`#${id} tbody`).replaceChildren(...rows);
}

function showLive(live) {
  document.getElementById("kpi-queued").textContent = live.queued;
  document.getElementById("kpi-queued-yours").textContent = live.queued_yours;
  document.getElementById("kpi-in-flight").textContent = live.in_flight;
  document.getElementById("kpi-workers").textContent = `${live.workers_alive} (${live.mode})`;

  const queue = charts.queue.data;
  queue.labels.push(new Date(live.at).toLocaleTimeString());
  queue.datasets[0].data.push(live.queued);
  queue.datasets[1].data.push(live.in_flight);
  if (queue.labels.length > QUEUE_HISTORY_POINTS) {
    queue.labels.shift();
    queue.datasets.forEach((dataset) => dataset.data.shift());
  }
  charts.queue.update();

  charts.devices.data.labels = live.devices.map((d) => d.device);
  charts.devices.data.datasets[0].data = live.devices.map((d) => d.busy);
  charts.devices.data.datasets[1].data = live.devices.map((d) => d.workers - d.busy);
  charts.devices.update();

  fillTable("workers-table", live.workers.map((w) => el("tr", {},
    el("td", { text: w.name }), el("td", { text: w.device }),
    el("td", { text: w.busy ? w.job_status : "idle" }),
    el("td", {}, w.job_id ? jobLink(w.job_id) : (w.busy ? "another key's job" : "")),
    el("td", { class: "num", text: w.busy_for_s === null ? "" : `${w.busy_for_s.toFixed(0)} s` }))));
}

function showOutcomes(series) {
  const short = series.bucket_s < 86400;
  charts.outcomes.data.labels = series.bucket_starts.map((iso) => {
    const at = new Date(iso);
    return short ? at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : at.toLocaleDateString();
  });
  charts.outcomes.data.datasets = series.series.map((s) => ({
    label: s.outcome, data: s.counts, backgroundColor: outcomeColour(s.outcome),
  }));
  charts.outcomes.update();
}

function problemLabel(row) {
  return row.problem_name ?? row.problem_id.slice(0, 10);
}

function showSpeedups(rows) {
  speedupRows = rows;
  const data = charts.speedups.data;
  data.labels = rows.map(problemLabel);
  data.datasets[0].data = rows.map((r) => [r.min, r.max]);
  data.datasets[1].data = rows.map((r) => [r.p25, r.p75]);
  data.datasets[2].data = rows.map((r) => r.median);
  // A log axis shows ratios fairly once they span an order of magnitude; below that it only crowds ticks.
  const low = Math.min(...rows.map((r) => r.min));
  const high = Math.max(...rows.map((r) => r.max));
  const logarithmic = rows.length > 0 && high / low >= 10;
  const y = charts.speedups.options.scales.y;
  y.type = logarithmic ? "logarithmic" : "linear";
  y.title.text = `speedup over eager (×${logarithmic ? ", log scale" : ""})`;
  charts.speedups.update();
}

function showRules(rules) {
  // An empty bar chart is a bare axis: say that nothing fired instead.
  document.getElementById("rules-none").hidden = rules.length > 0;
  document.getElementById("rules-fired").hidden = rules.length === 0;
  charts.rules.data.labels = rules.map((r) => r.rule);
  charts.rules.data.datasets[0].data = rules.map((r) => r.jobs);
  charts.rules.data.datasets[0].backgroundColor = rules.map((r) => (r.severity === "reject" ? "#d64545" : "#e8912d"));
  charts.rules.update();
  fillTable("rules-table", rules.map((r) => el("tr", {},
    el("td", {}, el("strong", { text: r.rule }), el("div", { class: "muted", text: r.severity })),
    el("td", { class: "num", text: r.jobs }),
    el("td", {},
      el("div", { text: r.line === null ? r.message : `line ${r.line}: ${r.message}` }),
      r.evidence ? el("pre", { class: "evidence", text: r.evidence }) : "",
      jobLink(r.example_job_id, `job ${r.example_job_id.slice(0, 12)}`)))));
}

function showStages(stages) {
  charts.stages.data.labels = stages.map((s) => s.stage);
  charts.stages.data.datasets[0].data = stages.map((s) => s.p50_s);
  charts.stages.data.datasets[1].data = stages.map((s) => s.p95_s);
  charts.stages.data.datasets[2].data = stages.map((s) => s.max_s);
  charts.stages.update();
  fillTable("stages-table", stages.map((s) => el("tr", {},
    el("td", { text: s.stage }), el("td", { class: "num", text: s.count }),
    el("td", { class: "num", text: formatNumber(s.mean_s) }), el("td", { class: "num", text: formatNumber(s.p95_s) }),
    el("td", { class: "num", text: formatNumber(s.max_s) }), el("td", {}, jobLink(s.slowest_job_id)))));
}

function showJobs(jobs) {
  fillTable("jobs-table", jobs.map((j) => el("tr", {},
    el("td", {}, jobLink(j.id)), el("td", { text: formatTime(j.created_at) }),
    el("td", { text: problemLabel(j) }),
    el("td", {}, outcomeBadge(j.outcome ?? j.status)),
    el("td", { class: "num", text: j.speedup === null ? "" : formatSpeedup(j.speedup) }),
    el("td", { class: "num", text: formatNumber(j.reward) }), el("td", { class: "num", text: j.rules_fired }))));
}

function hours() {
  return document.getElementById("window").value;
}

async function refreshLive() {
  showLive(await getJson("/v1/dashboard/live"));
}

async function refreshAggregates() {
  const span = `hours=${encodeURIComponent(hours())}`;
  const outcome = document.getElementById("outcome-filter").value;
  const jobsQuery = outcome ? `?outcome=${encodeURIComponent(outcome)}` : "";
  const [outcomes, speedups, rules, stages, jobs] = await Promise.all([
    getJson(`/v1/dashboard/outcomes?${span}`),
    getJson(`/v1/dashboard/speedups?${span}`),
    getJson(`/v1/dashboard/rules?${span}`),
    getJson(`/v1/dashboard/stages?${span}`),
    getJson(`/v1/dashboard/jobs${jobsQuery}`),
  ]);
  showOutcomes(outcomes);
  showSpeedups(speedups);
  showRules(rules);
  showStages(stages);
  showJobs(jobs);
}

// Runs `refresh` now and then every `everyMs` after the previous run ended (never two at once).
function poll(refresh, everyMs) {
  const run = async () => {
    try {
      await refresh();
      clearError();
    } catch (error) {
      showError(error);
      if (error instanceof AuthError) return;
    }
    setTimeout(run, everyMs);
  };
  run();
}

function fillOutcomeFilter() {
  const select = document.getElementById("outcome-filter");
  for (const outcome of Object.keys(OUTCOME_COLOURS)) {
    select.append(el("option", { value: outcome, text: outcome }));
  }
}

async function main() {
  const session = await signIn();
  showSession(session);
  fillOutcomeFilter();
  makeCharts();
  const reload = () => refreshAggregates().then(clearError, showError);
  document.getElementById("window").addEventListener("change", reload);
  document.getElementById("outcome-filter").addEventListener("change", reload);
  poll(refreshLive, LIVE_EVERY_MS);
  poll(refreshAggregates, AGGREGATES_EVERY_MS);
}

main().catch(showError);
