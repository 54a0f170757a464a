// List + watch over fetch: paged first load, then a newline-delimited JSON event stream,
// resumed from the last resourceVersion and re-listed when the server says it is gone.
import { rawRequest, request, withQuery } from './client';
import { ApiError, isStatus, Status } from './status';
import type { KubeList, KubeObject, WatchEvent } from './types';

/** Splits a stream of text chunks into complete lines; a line may span chunks. */
export class LineSplitter {
  private rest = '';

  push(chunk: string): string[] {
    const text = this.rest + chunk;
    const lines = text.split('\n');
    this.rest = lines.pop() ?? '';
    return lines.map((l) => l.replace(/\r$/, '')).filter((l) => l.trim() !== '');
  }

  /** The last line, if the stream ended without a newline. */
  flush(): string[] {
    const last = this.rest.trim();
    this.rest = '';
    return last ? [last] : [];
  }
}

/** Parses one line of a watch stream; null for a line that is not an event. */
export function parseWatchLine<T = KubeObject>(line: string): WatchEvent<T> | null {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof v !== 'object' || v === null) return null;
  const ev = v as WatchEvent<T>;
  if (typeof ev.type !== 'string' || typeof ev.object !== 'object' || ev.object === null) return null;
  return ev;
}

/** The server says the resourceVersion we watch from is too old: list again. */
export class WatchExpired extends Error {
  constructor(message = 'resourceVersion expired') {
    super(message);
    this.name = 'WatchExpired';
  }
}

export interface ListResult<T> {
  items: T[];
  resourceVersion: string;
}

/** The first page: enough rows to show at once. */
export const PAGE_SIZE = 500;

/** The requests listAll makes for `path`: the first page, and the whole collection. */
export function listRequests(path: string): { firstPage: string; whole: string } {
  return { firstPage: withQuery(path, { limit: PAGE_SIZE }), whole: path };
}

/**
 * Lists every object of a collection. The whole collection is asked for in one request
 * and, when `onPage` wants rows early, a first page of PAGE_SIZE at the same time: the
 * page's rows show while the server answers the whole request, instead of the page and
 * then its continuation one after the other (10,000 VMs: a round trip and a snapshot
 * read less). A page that arrives after the whole list is not shown.
 */
export async function listAll<T extends KubeObject>(
  path: string,
  signal?: AbortSignal,
  onPage?: (itemsSoFar: T[]) => void,
): Promise<ListResult<T>> {
  let done = false;
  const { firstPage, whole: wholePath } = listRequests(path);
  if (onPage) {
    request<KubeList<T>>('GET', firstPage, { signal }).then(
      (page) => {
        if (!done && page.metadata?.continue) onPage(page.items ?? []);
      },
      // Only an early view: the whole request below reports what went wrong.
      () => undefined,
    );
  }
  const whole = await request<KubeList<T>>('GET', wholePath, { signal });
  done = true;
  return { items: whole.items ?? [], resourceVersion: whole.metadata?.resourceVersion ?? '' };
}

/**
 * Reads one watch stream until the server ends it. Returns the last resourceVersion seen
 * (from events and bookmarks). Throws WatchExpired on a 410, ApiError on other errors.
 */
export async function watchOnce<T extends KubeObject>(
  path: string,
  resourceVersion: string,
  onEvent: (ev: WatchEvent<T>) => void,
  signal?: AbortSignal,
): Promise<string> {
  const url = withQuery(path, { watch: 1, resourceVersion, allowWatchBookmarks: true });
  const res = await rawRequest('GET', url, { signal });
  if (!res.body) throw new Error('The browser gave no stream for the watch');
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const splitter = new LineSplitter();
  let rv = resourceVersion;
  const handle = (line: string) => {
    const ev = parseWatchLine<T>(line);
    if (!ev) return;
    if (ev.type === 'ERROR') {
      const st = ev.object as unknown as Status;
      if (isStatus(st) && st.code === 410) throw new WatchExpired(st.message);
      throw new ApiError(st.code ?? 500, st.message ?? 'watch error', isStatus(st) ? st : undefined);
    }
    rv = ev.object.metadata?.resourceVersion || rv;
    if (ev.type !== 'BOOKMARK') onEvent(ev);
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      for (const line of splitter.push(decoder.decode(value, { stream: true }))) handle(line);
    }
    for (const line of splitter.push(decoder.decode())) handle(line);
    for (const line of splitter.flush()) handle(line);
  } finally {
    reader.cancel().catch(() => undefined);
  }
  return rv;
}

export interface InformerSink<T> {
  /** A (partial while `complete` is false) result of a fresh list. */
  replace(items: T[], complete: boolean): void;
  /** One watch event (ADDED, MODIFIED or DELETED). */
  event(ev: WatchEvent<T>): void;
  /** The informer stopped for good (e.g. 403), or the error is passing (retrying). */
  error(err: ApiError | Error, fatal: boolean): void;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    });
  });

/** Keeps a sink in step with a collection until stopped. */
export class Informer<T extends KubeObject> {
  private ctrl = new AbortController();

  constructor(
    private readonly path: string,
    private readonly sink: InformerSink<T>,
  ) {}

  start(): void {
    void this.run();
  }

  stop(): void {
    this.ctrl.abort();
  }

  private async run(): Promise<void> {
    const signal = this.ctrl.signal;
    let backoff = 1000;
    let rv = '';
    while (!signal.aborted) {
      try {
        if (!rv) {
          // The sink may show the first pages of a big collection while the rest loads.
          const result = await listAll<T>(this.path, signal, (items) => this.sink.replace(items, false));
          this.sink.replace(result.items, true);
          rv = result.resourceVersion;
        }
        const started = Date.now();
        rv = await watchOnce<T>(this.path, rv, (ev) => this.sink.event(ev), signal);
        // A server that ends watches at once must not make us spin.
        if (Date.now() - started < 1000) await sleep(1000, signal);
        backoff = 1000;
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof WatchExpired) {
          rv = '';
          continue;
        }
        if (e instanceof ApiError && (e.code === 401 || e.code === 403 || e.code === 404)) {
          this.sink.error(e, true);
          return;
        }
        this.sink.error(e instanceof Error ? e : new Error(String(e)), false);
        await sleep(backoff, signal);
        backoff = Math.min(backoff * 2, 30000);
        // After an error of the list itself we start from a list again.
        if (e instanceof ApiError && e.code === 410) rv = '';
      }
    }
  }
}
