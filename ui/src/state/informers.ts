// Shared, reference-counted informers: every component that shows the same collection
// uses one list+watch. An unused one lingers briefly so moving between pages does not
// re-list.
import { useCallback, useSyncExternalStore } from 'react';
import type { KubeObject } from '../api/types';
import { Informer } from '../api/watch';
import { ResourceStore, type StoreSnapshot } from './store';

interface Entry {
  store: ResourceStore<KubeObject>;
  informer: Informer<KubeObject>;
  refs: number;
  stopTimer?: ReturnType<typeof setTimeout>;
}

const LINGER_MS = 30_000;
const entries = new Map<string, Entry>();

function acquire(path: string): Entry {
  let e = entries.get(path);
  if (!e) {
    const store = new ResourceStore<KubeObject>();
    const informer = new Informer<KubeObject>(path, store);
    e = { store, informer, refs: 0 };
    entries.set(path, e);
    informer.start();
  }
  if (e.stopTimer) {
    clearTimeout(e.stopTimer);
    e.stopTimer = undefined;
  }
  e.refs++;
  return e;
}

function release(path: string): void {
  const e = entries.get(path);
  if (!e) return;
  e.refs--;
  if (e.refs > 0) return;
  e.stopTimer = setTimeout(() => {
    e.informer.stop();
    entries.delete(path);
  }, LINGER_MS);
}

/** Stops every informer (on log-out). */
export function stopAllInformers(): void {
  for (const e of entries.values()) {
    if (e.stopTimer) clearTimeout(e.stopTimer);
    e.informer.stop();
  }
  entries.clear();
}

const EMPTY: StoreSnapshot<KubeObject> = {
  items: new Map<string, KubeObject>(),
  loaded: false,
  error: null,
  fatal: false,
  version: 0,
};

const noop = () => () => undefined;

/** A live view of a collection; `path` null means "nothing to watch yet". */
export function useList<T extends KubeObject>(path: string | null): StoreSnapshot<T> {
  // A new subscribe function makes React re-subscribe: keep one per path.
  const subscribe = useCallback((fn: () => void) => {
    if (!path) return noop();
    const e = acquire(path);
    const unsub = e.store.subscribe(fn);
    return () => {
      unsub();
      release(path);
    };
  }, [path]);
  const getSnapshot = () => {
    if (!path) return EMPTY as unknown as StoreSnapshot<T>;
    const e = entries.get(path);
    return (e ? e.store.snapshot() : EMPTY) as unknown as StoreSnapshot<T>;
  };
  return useSyncExternalStore(subscribe, getSnapshot);
}
