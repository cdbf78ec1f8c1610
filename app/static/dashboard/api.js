// Shared by the dashboard pages: sign-in, authenticated JSON requests, and DOM helpers.
//
// The API key is asked for once per browser tab and kept in sessionStorage (gone when the tab
// closes), never in a URL or a cookie; every request sends it as `Authorization: Bearer`.
// Everything a job contains is inserted as text (textContent), never parsed as HTML.

const KEY_ITEM = "kerneljudge.apiKey";

export class AuthError extends Error {}

function storedKey() {
  return sessionStorage.getItem(KEY_ITEM);
}

export async function getJson(path) {
  const headers = { Accept: "application/json" };
  const key = storedKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch(path, { headers, cache: "no-store" });
  if (response.status === 401) {
    throw new AuthError("the server did not accept this API key");
  }
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const body = await response.json();
      detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    } catch {
      // not JSON: keep the status text
    }
    throw new Error(`${path}: HTTP ${response.status}: ${detail}`);
  }
  return response.json();
}

// Resolves with the session (/v1/dashboard/session) once the page may load data: at once in
// open mode or with a key kept from earlier in this tab, else after the login form succeeds.
export async function signIn() {
  const access = await (await fetch("/v1/dashboard/access", { cache: "no-store" })).json();
  if (!access.key_required || storedKey()) {
    try {
      return await getJson("/v1/dashboard/session");
    } catch (error) {
      if (!(error instanceof AuthError)) throw error;
      sessionStorage.removeItem(KEY_ITEM);
    }
  }
  return askForKey();
}

function askForKey() {
  const form = document.getElementById("login");
  const input = document.getElementById("api-key");
  const message = document.getElementById("login-message");
  document.body.classList.add("signed-out");
  input.focus();
  return new Promise((resolve) => {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY_ITEM, input.value.trim());
      input.value = "";
      try {
        const session = await getJson("/v1/dashboard/session");
        document.body.classList.remove("signed-out");
        resolve(session);
      } catch (error) {
        sessionStorage.removeItem(KEY_ITEM);
        message.textContent = error instanceof AuthError
          ? "That key was not accepted. Use a key from the server's KERNELJUDGE_API_KEYS."
          : `Could not reach the server: ${error.message}`;
      }
    });
  });
}

export function signOut() {
  sessionStorage.removeItem(KEY_ITEM);
  window.location.reload();
}

export function showSession(session) {
  const scope = session.scope === "all_keys" ? "all API keys (admin)" : `your API key (${session.key_id})`;
  document.getElementById("scope").textContent = `Showing jobs of ${scope}`;
  document.getElementById("sign-out").addEventListener("click", signOut);
}

// el("td", {class: "num", text: "3"}, child, ...): an element whose text is never parsed as HTML.
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

export function jobLink(jobId, text = null) {
  return el("a", { href: `/dashboard/jobs/${encodeURIComponent(jobId)}`, text: text ?? jobId.slice(0, 12) });
}

export function formatTime(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

export function formatNumber(value, digits = 2) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

// Speedups span 0.001× (CPU interpreter) to 100×: three significant digits, never "0.00×".
export function formatSpeedup(value) {
  return value === null || value === undefined ? "–" : `${Number(value).toPrecision(3)}×`;
}

export function showError(error) {
  const banner = document.getElementById("error");
  banner.textContent = error instanceof AuthError
    ? "The server no longer accepts this API key: sign out and sign in again."
    : `Could not load dashboard data: ${error.message}`;
  banner.hidden = false;
}

export function clearError() {
  document.getElementById("error").hidden = true;
}

// Colours per outcome, shared by the charts and the tables.
export const OUTCOME_COLOURS = {
  ok: "#2e9d4f",
  incorrect: "#e8912d",
  compile_error: "#d64545",
  runtime_error: "#9b59b6",
  timeout: "#8d6e63",
  rejected: "#7b1f1f",
  invalid_input: "#9e9e9e",
  sandbox_error: "#e91e8c",
  failed: "#37474f",
  cancelled: "#cfd8dc",
};

export function outcomeColour(outcome) {
  return OUTCOME_COLOURS[outcome] ?? "#5c6bc0";
}

export function outcomeBadge(outcome) {
  const badge = el("span", { class: "badge", text: outcome });
  badge.style.backgroundColor = outcomeColour(outcome);  // CSSOM: allowed by the page's style-src 'self'
  return badge;
}
