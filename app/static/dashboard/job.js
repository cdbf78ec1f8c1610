// One job: its result, the rules that fired with their evidence, and the candidate's source.
import { el, formatNumber, formatSpeedup, formatTime, getJson, outcomeBadge, showError, showSession, signIn } from "./api.js";

Chart.defaults.animation = false;
Chart.defaults.maintainAspectRatio = false;

function jobIdFromUrl() {
  const parts = window.location.pathname.split("/");
  return decodeURIComponent(parts[parts.length - 1]);
}

function fact(term, value) {
  return value === null || value === undefined || value === "" ? [] : [el("dt", { text: term }), el("dd", { text: value })];
}

function environmentText(environment) {
  const parts = [environment.gpu_name ?? environment.device];
  for (const name of ["torch", "triton", "cuda", "driver", "sandbox"]) {
    if (environment[name]) parts.push(`${name} ${environment[name]}`);
  }
  return parts.join(", ");
}

// Fills a table's body; a table with nothing to show is hidden rather than left as bare headers.
function fillTable(id, rows) {
  const table = document.getElementById(id);
  table.querySelector("tbody").replaceChildren(...rows);
  table.hidden = rows.length === 0;
}

function showSummary(detail) {
  const job = detail.job;
  const result = job.result;
  document.getElementById("job-id").textContent = job.id;
  document.title = `kerneljudge job ${job.id.slice(0, 12)}`;
  const outcome = job.status === "done" && result ? result.status : job.status;
  document.getElementById("job-outcome").replaceChildren(outcomeBadge(outcome));
  const speedup = result?.speedup === null || result?.speedup === undefined ? null
    : formatSpeedup(result.speedup) + (result.timing
      ? ` (95% CI ${formatSpeedup(result.timing.speedup_ci95[0])}–${formatSpeedup(result.timing.speedup_ci95[1])})` : "");
  document.getElementById("summary-list").replaceChildren(
    ...fact("Problem", detail.problem_name ? `${detail.problem_name} (${job.problem_id.slice(0, 12)})` : job.problem_id),
    ...fact("Job status", job.status),
    ...fact("Reward", result ? `${formatNumber(result.reward, 3)} (${result.reward_preset})` : null),
    ...fact("Speedup", speedup),
    ...fact("Compiled / correct / flagged",
      result ? `${result.compiled ? "yes" : "no"} / ${result.correct ? "yes" : "no"} / ${result.flagged ? "yes" : "no"}` : null),
    ...fact("Backend", result?.backend),
    ...fact("Created", formatTime(job.created_at)),
    ...fact("Finished", formatTime(job.finished_at)),
    ...fact("Worker", job.worker ? `${job.worker}${job.gpu === null ? "" : ` (GPU ${job.gpu})`}` : null),
    ...fact("Attempts", job.attempts),
    ...fact("Service error", job.error),
    ...fact("Environment", result?.environment ? environmentText(result.environment) : null),
  );
  const error = result?.error;
  document.getElementById("job-error").replaceChildren(...(error ? [
    el("h3", { text: `Error: ${error.kind}${error.line ? ` (line ${error.line})` : ""}` }),
    el("p", { text: error.message }),
    error.log_excerpt ? el("pre", { class: "source", text: error.log_excerpt }) : "",
  ] : []));
}

function showRules(rules) {
  const rows = rules.length ? rules.map((r) => el("tr", { class: r.severity },
    el("td", { text: r.rule }), el("td", { text: r.severity }),
    el("td", {}, r.line === null ? "" : el("a", { href: `#line-${r.line}`, text: r.line })),
    el("td", { text: r.message }), el("td", {}, r.evidence ? el("pre", { class: "evidence", text: r.evidence }) : "")))
    : [el("tr", {}, el("td", { colspan: "5", class: "muted", text: "No rule fired." }))];
  document.querySelector("#rules-table tbody").replaceChildren(...rows);
}

function showMeasurements(result) {
  const stages = Object.entries(result?.stages ?? {});
  new Chart(document.getElementById("stages-chart"), {
    type: "bar",
    data: { labels: stages.map(([name]) => name),
            datasets: [{ label: "seconds", data: stages.map(([, seconds]) => seconds), backgroundColor: "#7986cb" }] },
    options: { indexAxis: "y", plugins: { legend: { display: false }, title: { display: true, text: "Seconds per stage" } },
               scales: { x: { beginAtZero: true } } },
  });
  fillTable("components-table", Object.entries(result?.reward_components ?? {}).map(([name, value]) =>
    el("tr", {}, el("td", { text: name }), el("td", { class: "num", text: formatNumber(value, 3) }))));
  const correctness = result?.correctness;
  const trials = correctness ? [...correctness.trials] : [];
  if (correctness?.shape_trial?.result) trials.push({ ...correctness.shape_trial.result, trial: "doubled batch" });
  fillTable("trials-table", trials.map((t) => el("tr", {},
    el("td", { text: t.trial }), el("td", { text: t.passed ? "yes" : "no" }),
    el("td", { class: "num", text: t.max_abs_error === null ? "" : t.max_abs_error.toExponential(2) }),
    el("td", { class: "num", text: t.max_rel_error === null ? "" : t.max_rel_error.toExponential(2) }),
    el("td", { text: t.message ?? "" }))));
  const timing = result?.timing;
  fillTable("timing-table", timing ? ["reference", "candidate"].map((who) =>
    el("tr", {}, el("td", { text: `${who} (${timing.method})` }),
      el("td", { class: "num", text: formatNumber(timing[who].median_ms, 4) }),
      el("td", { class: "num", text: formatNumber(timing[who].mean_ms, 4) }),
      el("td", { class: "num", text: timing[who].n }),
      el("td", { class: "num", text: formatNumber(timing[who].rse, 4) }))) : []);
}

function showSource(target, source, markedLines = new Set()) {
  const lines = (source ?? "").split("\n");
  target.replaceChildren(...lines.map((text, index) => {
    const number = index + 1;
    return el("span", { id: `line-${number}`, class: markedLines.has(number) ? "line marked" : "line" },
      el("span", { class: "line-number", text: number }), text);
  }));
}

function showSubmission(detail) {
  const result = detail.job.result;
  const marked = new Set((result?.rules ?? []).map((r) => r.line).filter((line) => line !== null));
  if (result?.error?.line) marked.add(result.error.line);
  showSource(document.getElementById("candidate"), detail.candidate ?? "(no candidate was found in the completion)", marked);
  if (detail.completion !== null) {
    document.getElementById("completion-details").hidden = false;
    document.getElementById("extraction").textContent = detail.extraction ?? "";
    document.getElementById("completion").textContent = detail.completion;
  }
  if (result?.candidate_log) {
    document.getElementById("log-details").hidden = false;
    document.getElementById("candidate-log").textContent = result.candidate_log;
  }
  document.getElementById("raw").textContent = JSON.stringify(detail.job, null, 2);
}

async function main() {
  showSession(await signIn());
  const detail = await getJson(`/v1/dashboard/jobs/${encodeURIComponent(jobIdFromUrl())}`);
  showSummary(detail);
  showRules(detail.job.result?.rules ?? []);
  showMeasurements(detail.job.result);
  showSubmission(detail);
}

main().catch(showError);
