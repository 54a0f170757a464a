// A collection of objects keyed by namespace/name, fed by an informer. Watch events are
// queued and applied in one batch per animation frame, so a burst of thousands of
// events costs one re-render.
import type { ApiError } from '../api/status';
import { objectKey, type KubeObject, type WatchEvent } from '../api/types';
import type { InformerSink } from '../api/watch';

export interface StoreSnapshot<T> {
  items: ReadonlyMap<string, T>;
  /** The first full list has arrived. */
  loaded: boolean;
  /** The last error; `fatal` means the informer gave up (e.g. 403). */
  error: (ApiError | Error) | null;
  fatal: boolean;
  /** Bumped on every change: cheap to compare in memo dependencies. */
  version: number;
}

export type Scheduler = (flush: () => void) => void;

/** Runs `flush` on the next animation frame, or within a second in a hidden tab. */
export const frameScheduler: Scheduler = (flush) => {
  let done = false;
  const once = () => {
    if (!done) {
      done = true;
      flush();
    }
  };
  if (typeof requestAnimationFrame === 'function') requestAnimationFrame(once);
  // rAF does not run in background tabs; a timer keeps the queue from growing forever.
  setTimeout(once, 1000);
};

export class ResourceStore<T extends KubeObject> implements InformerSink<T> {
  private items = new Map<string, T>();
  private pending: WatchEvent<T>[] = [];
  private scheduled = false;
  private listeners = new Set<() => void>();
  private snap: StoreSnapshot<T>;

  constructor(private readonly schedule: Scheduler = frameScheduler) {
    this.snap = { items: this.items, loaded: false, error: null, fatal: false, version: 0 };
  }

  snapshot = (): StoreSnapshot<T> => this.snap;

  subscribe = (fn: () => void): (() => void) => {
    this.listeners.add(fn);
    return () => {
      this.listeners.delete(fn);
    };
  };

  replace(list: T[], complete: boolean): void {
    // A re-list's partial pages would make rows vanish and come back: keep the old
    // items until the full list is in.
    if (!complete && this.snap.loaded) return;
    const next = new Map<string, T>();
    for (const obj of list) next.set(objectKey(obj), obj);
    this.items = next;
    // Events queued before this list are older than it.
    if (complete) this.pending = [];
    this.publish({ loaded: this.snap.loaded || complete, error: null, fatal: false });
  }

  event(ev: WatchEvent<T>): void {
    this.pending.push(ev);
    if (!this.scheduled) {
      this.scheduled = true;
      this.schedule(() => this.flush());
    }
  }

  error(err: ApiError | Error, fatal: boolean): void {
    this.publish({ error: err, fatal, loaded: this.snap.loaded || fatal });
  }

  /** Applies every queued event at once. */
  flush(): void {
    this.scheduled = false;
    if (this.pending.length === 0) return;
    const next = new Map(this.items);
    for (const ev of this.pending) {
      const key = objectKey(ev.object);
      if (ev.type === 'DELETED') next.delete(key);
      else if (ev.type === 'ADDED' || ev.type === 'MODIFIED') next.set(key, ev.object);
    }
    this.pending = [];
    this.items = next;
    this.publish({ error: null, fatal: false });
  }

  private publish(change: Partial<StoreSnapshot<T>>): void {
    this.snap = { ...this.snap, ...change, items: this.items, version: this.snap.version + 1 };
    for (const fn of [...this.listeners]) fn();
  }
}
