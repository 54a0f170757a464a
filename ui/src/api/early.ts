// Answers to requests made before the app's code had loaded (boot/early.ts starts them
// while the browser still fetches and compiles the app): the session, and the lists the
// first page shows. The app takes each one once, in place of making the same request.

interface EarlyRequests {
  /** GET /ui/session; resolves once the lists it allows are on their way. */
  session?: Promise<Response>;
  /** GET requests by path, each taken at most once. */
  gets: Map<string, Promise<Response>>;
}

declare global {
  interface Window {
    __virtplaneEarly?: EarlyRequests;
  }
}

/** An early answer not taken by then is dropped (the app has gone elsewhere). */
const UNCLAIMED_MS = 30_000;

function registry(): EarlyRequests | undefined {
  return typeof window === 'undefined' ? undefined : window.__virtplaneEarly;
}

/** Used by the early script: its registry, made on first use. */
export function earlyRequests(): EarlyRequests {
  return (window.__virtplaneEarly ??= { gets: new Map() });
}

/** Used by the early script: a GET started now, for the app to take. */
export function startEarlyGet(path: string, init: RequestInit): void {
  const { gets } = earlyRequests();
  // A request that failed to send is the app's to make again.
  const answer = fetch(path, init);
  answer.catch(() => gets.delete(path));
  gets.set(path, answer);
  setTimeout(() => {
    if (gets.get(path) === answer) gets.delete(path);
  }, UNCLAIMED_MS);
}

/** The early answer to GET `path`, if one was started and not taken yet. */
export function takeEarlyGet(path: string): Promise<Response> | undefined {
  const gets = registry()?.gets;
  const answer = gets?.get(path);
  if (answer) gets?.delete(path);
  return answer;
}

/** The early answer to GET /ui/session, if there is one not taken yet. */
export function takeEarlySession(): Promise<Response> | undefined {
  const early = registry();
  const session = early?.session;
  if (early) early.session = undefined;
  return session;
}
