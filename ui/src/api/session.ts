// The console's sign-in session: a token exchanged for an HttpOnly cookie + CSRF token.
import { getCsrfToken } from './client';
import { takeEarlySession } from './early';
import { errorFromResponse } from './status';

export interface User {
  username: string;
  groups?: string[];
}

export interface Session {
  user: User;
  csrfToken: string;
}

const SESSION = '/ui/session';

/** GET /ui/session (the early script asks it too, before the app has loaded). */
export function requestSession(): Promise<Response> {
  return fetch(SESSION, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
}

/** The current session, or null when neither a cookie nor a client certificate names a user. */
export async function fetchSession(): Promise<Session | null> {
  const res = await (takeEarlySession() ?? requestSession());
  if (res.status === 401) return null;
  if (!res.ok) throw await errorFromResponse(res);
  return (await res.json()) as Session;
}

/** Signs in with a bearer token; a refused token throws an ApiError with code 401. */
export async function signIn(token: string): Promise<Session> {
  const res = await fetch(SESSION, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify({ token }),
  });
  if (!res.ok) throw await errorFromResponse(res);
  return (await res.json()) as Session;
}

export async function signOut(): Promise<void> {
  const res = await fetch(SESSION, {
    method: 'DELETE',
    credentials: 'same-origin',
    headers: { 'X-CSRF-Token': getCsrfToken() },
  });
  // A session that is already gone is as good as a logged-out one.
  if (!res.ok && res.status !== 401) throw await errorFromResponse(res);
}

