// The one place that talks HTTP to the API server: adds the CSRF header and turns
// non-2xx answers into ApiErrors.
import { takeEarlyGet } from './early';
import { ApiError, errorFromResponse } from './status';

let csrfToken = '';
let unauthorizedHandler: (() => void) | null = null;

export function setCsrfToken(token: string): void {
  csrfToken = token;
}

export function getCsrfToken(): string {
  return csrfToken;
}

/** Called when any API call answers 401: the session has ended. */
export function setUnauthorizedHandler(fn: (() => void) | null): void {
  unauthorizedHandler = fn;
}

export interface RequestOptions {
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
  headers?: Record<string, string>;
}

export function requestInit(method: string, opts: RequestOptions = {}): RequestInit {
  const headers: Record<string, string> = {
    // The server requires it on every cookie-authenticated request.
    'X-CSRF-Token': csrfToken,
    Accept: 'application/json',
    ...opts.headers,
  };
  let body: BodyInit | undefined;
  if (opts.body !== undefined) {
    headers['Content-Type'] = opts.contentType ?? 'application/json';
    body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
  }
  return { method, credentials: 'same-origin', headers, body, signal: opts.signal };
}

/** Sends a request; resolves with the raw Response when it is 2xx. */
export async function rawRequest(
  method: string,
  path: string,
  opts: RequestOptions = {},
): Promise<Response> {
  // The early script may have asked for this already, while the app loaded.
  const early = method === 'GET' ? takeEarlyGet(path) : undefined;
  const res = await (early ?? fetch(path, requestInit(method, opts)));
  if (!res.ok) {
    const err = await errorFromResponse(res);
    if (res.status === 401 && unauthorizedHandler) unauthorizedHandler();
    throw err;
  }
  return res;
}

export async function request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
  const res = await rawRequest(method, path, opts);
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  if (!text) return undefined as T;
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new ApiError(res.status, `The server sent a response that is not JSON: ${text.slice(0, 200)}`);
  }
}

export const api = {
  get: <T>(path: string, signal?: AbortSignal) => request<T>('GET', path, { signal }),
  post: <T>(path: string, body: unknown) => request<T>('POST', path, { body }),
  put: <T>(path: string, body: unknown) => request<T>('PUT', path, { body }),
  mergePatch: <T>(path: string, body: unknown) =>
    request<T>('PATCH', path, { body, contentType: 'application/merge-patch+json' }),
  del: <T>(path: string, body?: unknown) => request<T>('DELETE', path, { body }),
};

/** Appends query parameters to a path that may already have some. */
export function withQuery(path: string, params: Record<string, string | number | boolean | undefined>): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === '') continue;
    parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`);
  }
  if (parts.length === 0) return path;
  return path + (path.includes('?') ? '&' : '?') + parts.join('&');
}
