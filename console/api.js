// The API, same origin: the session travels in the `__Host-session` cookie (HttpOnly: this
// code never sees it). Every error is an RFC 9457 problem document, or OAuth's own
// `{error, error_description}` (a consent to a request the server refuses); `ProblemError`
// carries either.

/** An error answer: `status`, `title`, `detail` (and the whole `problem`). */
export class ProblemError extends Error {
  constructor(status, problem) {
    const title = problem.title || problem.error;
    const detail = problem.detail || problem.error_description;
    super(detail || title || `HTTP ${status}`);
    this.status = status;
    this.title = title || `HTTP ${status}`;
    this.detail = detail || '';
    this.problem = problem;
  }
}

/**
 * Calls the API: `method` and `path` (`/api/…`), an optional JSON `body` and extra `headers`.
 * Resolves to `{status, headers, body}` (body parsed when JSON); a 402 resolves too (the caller
 * pays); any other 4xx/5xx rejects with a `ProblemError`.
 */
export async function call(method, path, { body, headers = {} } = {}) {
  const init = {
    method,
    headers: { accept: 'application/json', ...headers },
    credentials: 'same-origin',
  };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = { detail: text };
    }
  }
  if (response.ok || response.status === 402) {
    return { status: response.status, headers: response.headers, body: parsed };
  }
  throw new ProblemError(response.status, parsed || {});
}

/** GET `path` and its body. */
export async function get(path) {
  return (await call('GET', path)).body;
}

/** Decodes a base64 JSON header (`PAYMENT-REQUIRED`, `PAYMENT-RESPONSE`). */
export function decodeHeader(value) {
  return JSON.parse(atob(value));
}

/** Encodes a value as a base64 JSON header (`PAYMENT-SIGNATURE`). */
export function encodeHeader(value) {
  return btoa(JSON.stringify(value));
}
