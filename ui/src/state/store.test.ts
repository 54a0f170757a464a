import { describe, expect, it } from 'vitest';
import type { KubeObject } from '../api/types';
import { ResourceStore } from './store';

const o = (name: string, v = '1'): KubeObject => ({ metadata: { namespace: 'ns', name, resourceVersion: v } });

function manualStore() {
  const queued: (() => void)[] = [];
  const store = new ResourceStore<KubeObject>((fn) => queued.push(fn));
  let notified = 0;
  store.subscribe(() => notified++);
  return { store, queued, notified: () => notified };
}

describe('ResourceStore', () => {
  it('applies a burst of watch events in one batch', () => {
    const { store, queued, notified } = manualStore();
    store.replace([o('a'), o('b')], true);
    expect(notified()).toBe(1);
    for (let i = 0; i < 1000; i++) store.event({ type: 'ADDED', object: o(`x${i}`) });
    store.event({ type: 'MODIFIED', object: o('a', '2') });
    store.event({ type: 'DELETED', object: o('b') });
    expect(queued).toHaveLength(1); // one flush scheduled for the whole burst
    expect(store.snapshot().items.size).toBe(2); // nothing applied yet
    queued[0]();
    const snap = store.snapshot();
    expect(notified()).toBe(2);
    expect(snap.items.size).toBe(1001);
    expect(snap.items.get('ns/a')?.metadata.resourceVersion).toBe('2');
    expect(snap.items.has('ns/b')).toBe(false);
  });

  it('gives a new snapshot (and map) per change, so memos see it', () => {
    const { store, queued } = manualStore();
    store.replace([o('a')], true);
    const before = store.snapshot();
    store.event({ type: 'ADDED', object: o('b') });
    queued[0]();
    const after = store.snapshot();
    expect(after).not.toBe(before);
    expect(after.items).not.toBe(before.items);
    expect(before.items.size).toBe(1);
    expect(after.version).toBeGreaterThan(before.version);
  });

  it('shows partial pages of the first list but not of a re-list', () => {
    const { store } = manualStore();
    store.replace([o('a')], false);
    expect(store.snapshot().loaded).toBe(false);
    expect(store.snapshot().items.size).toBe(1);
    store.replace([o('a'), o('b')], true);
    expect(store.snapshot().loaded).toBe(true);
    store.replace([o('c')], false); // a re-list's first page
    expect([...store.snapshot().items.keys()]).toEqual(['ns/a', 'ns/b']);
  });

  it('drops events queued before a full list', () => {
    const { store, queued } = manualStore();
    store.event({ type: 'ADDED', object: o('old') });
    store.replace([o('a')], true);
    queued[0]();
    expect([...store.snapshot().items.keys()]).toEqual(['ns/a']);
  });

  it('records errors; a fatal one counts as loaded', () => {
    const { store } = manualStore();
    store.error(new Error('nope'), true);
    expect(store.snapshot()).toMatchObject({ fatal: true, loaded: true });
  });
});
