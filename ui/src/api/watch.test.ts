import { afterEach, describe, expect, it, vi } from 'vitest';
import type { KubeObject, WatchEvent } from './types';
import { Informer, LineSplitter, listAll, parseWatchLine, watchOnce, WatchExpired, type InformerSink } from './watch';

function streamResponse(chunks: (string | Uint8Array)[], status = 200): Response {
  const enc = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    start(ctrl) {
      for (const c of chunks) ctrl.enqueue(typeof c === 'string' ? enc.encode(c) : c);
      ctrl.close();
    },
  });
  return new Response(body, { status });
}

const obj = (name: string, rv: string) => ({ metadata: { name, namespace: 'ns', resourceVersion: rv } });

afterEach(() => vi.unstubAllGlobals());

describe('LineSplitter', () => {
  it('joins a line split across chunks', () => {
    const s = new LineSplitter();
    expect(s.push('{"a":')).toEqual([]);
    expect(s.push('1}\n{"b"')).toEqual(['{"a":1}']);
    expect(s.push(':2}\n')).toEqual(['{"b":2}']);
    expect(s.flush()).toEqual([]);
  });

  it('yields several lines from one chunk, skips blank lines and strips CR', () => {
    const s = new LineSplitter();
    expect(s.push('one\r\n\ntwo\nthr')).toEqual(['one', 'two']);
    expect(s.flush()).toEqual(['thr']);
  });
});

describe('parseWatchLine', () => {
  it('parses events and rejects garbage', () => {
    expect(parseWatchLine('{"type":"ADDED","object":{"metadata":{}}}')?.type).toBe('ADDED');
    expect(parseWatchLine('not json')).toBeNull();
    expect(parseWatchLine('{"type":"ADDED"}')).toBeNull();
    expect(parseWatchLine('42')).toBeNull();
  });
});

describe('watchOnce', () => {
  it('delivers events split across chunks, including a split multi-byte character', async () => {
    const line1 = JSON.stringify({ type: 'ADDED', object: { metadata: { name: 'vm-ü', resourceVersion: '5' } } }) + '\n';
    const bytes = new TextEncoder().encode(line1);
    const cut = bytes.indexOf(0xc3) + 1; // inside the two bytes of "ü"
    const bookmark = JSON.stringify({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '9' } } });
    vi.stubGlobal(
      'fetch',
      vi.fn(async () => streamResponse([bytes.slice(0, cut), bytes.slice(cut), bookmark.slice(0, 10), bookmark.slice(10)])),
    );
    const events: WatchEvent<KubeObject>[] = [];
    const rv = await watchOnce('/api/x', '1', (e) => events.push(e));
    expect(events.map((e) => e.object.metadata.name)).toEqual(['vm-ü']);
    expect(rv).toBe('9'); // bookmarks move the resourceVersion but are not events
    const url = (fetch as unknown as { mock: { calls: [string][] } }).mock.calls[0][0];
    expect(url).toBe('/api/x?watch=1&resourceVersion=1&allowWatchBookmarks=true');
  });

  it('throws WatchExpired on an ERROR 410', async () => {
    const err = JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410, message: 'too old' } }) + '\n';
    vi.stubGlobal('fetch', vi.fn(async () => streamResponse([err])));
    await expect(watchOnce('/api/x', '1', () => undefined)).rejects.toBeInstanceOf(WatchExpired);
  });

  it('appends watch parameters to a path with a query', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => streamResponse([])));
    await watchOnce('/api/v1/namespaces/a/events?fieldSelector=involvedObject.name%3Dvm', '3', () => undefined);
    const url = (fetch as unknown as { mock: { calls: [string][] } }).mock.calls[0][0];
    expect(url).toBe('/api/v1/namespaces/a/events?fieldSelector=involvedObject.name%3Dvm&watch=1&resourceVersion=3&allowWatchBookmarks=true');
  });
});

describe('listAll', () => {
  it('asks for a first page of 500 and the whole collection at once, and shows the page first', async () => {
    const calls: string[] = [];
    let answerWhole: (r: Response) => void = () => undefined;
    vi.stubGlobal(
      'fetch',
      vi.fn((url: string) => {
        calls.push(url);
        if (url.endsWith('limit=500')) {
          const page = { metadata: { continue: 'c1', resourceVersion: '10' }, items: [obj('a', '1')] };
          return Promise.resolve(new Response(JSON.stringify(page), { status: 200 }));
        }
        return new Promise<Response>((resolve) => (answerWhole = resolve));
      }),
    );
    const seen: number[] = [];
    const listed = listAll('/apis/kubevirt.io/v1/virtualmachines', undefined, (items) => seen.push(items.length));
    await vi.waitFor(() => expect(seen).toEqual([1]));
    const whole = { metadata: { resourceVersion: '11' }, items: [obj('a', '1'), obj('b', '2')] };
    answerWhole(new Response(JSON.stringify(whole), { status: 200 }));
    const r = await listed;
    expect(r.items.map((i) => i.metadata.name)).toEqual(['a', 'b']);
    expect(r.resourceVersion).toBe('11');
    expect(calls.sort()).toEqual(['/apis/kubevirt.io/v1/virtualmachines', '/apis/kubevirt.io/v1/virtualmachines?limit=500']);
  });

  it('does not show a first page that comes after the whole list, nor one of a small collection', async () => {
    let answerPage: (r: Response) => void = () => undefined;
    vi.stubGlobal(
      'fetch',
      vi.fn((url: string) =>
        url.endsWith('limit=500')
          ? new Promise<Response>((resolve) => (answerPage = resolve))
          : Promise.resolve(new Response(JSON.stringify({ metadata: { resourceVersion: '5' }, items: [obj('a', '1')] }))),
      ),
    );
    const seen: number[] = [];
    await listAll('/api/v1/nodes', undefined, (items) => seen.push(items.length));
    answerPage(new Response(JSON.stringify({ metadata: { continue: 'c' }, items: [obj('a', '1')] })));
    await new Promise((r) => setTimeout(r, 0));
    expect(seen).toEqual([]);
  });

  it('reports the whole request\'s error', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify({ kind: 'Status', code: 403, message: 'no' }), { status: 403 })));
    await expect(listAll('/api/v1/nodes', undefined, () => undefined)).rejects.toMatchObject({ code: 403 });
  });

  it('sends the CSRF header and same-origin credentials', async () => {
    const { setCsrfToken } = await import('./client');
    setCsrfToken('tok');
    const fetchMock = vi.fn(async (_url: string, _init: RequestInit) => new Response(JSON.stringify({ metadata: {}, items: [] })));
    vi.stubGlobal('fetch', fetchMock);
    await listAll('/api/v1/nodes');
    const init = fetchMock.mock.calls[0][1];
    expect(init.credentials).toBe('same-origin');
    expect((init.headers as Record<string, string>)['X-CSRF-Token']).toBe('tok');
  });
});

describe('Informer', () => {
  it('re-lists after a 410 and keeps watching', async () => {
    const responses: (() => Response)[] = [
      () => new Response(JSON.stringify({ metadata: { resourceVersion: '1' }, items: [obj('a', '1')] })),
      () => streamResponse([JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410 } }) + '\n']),
      () => new Response(JSON.stringify({ metadata: { resourceVersion: '7' }, items: [obj('a', '6'), obj('b', '7')] })),
      () => streamResponse([JSON.stringify({ type: 'DELETED', object: obj('a', '8') }) + '\n']),
    ];
    let i = 0;
    const urls: string[] = [];
    let informer: Informer<KubeObject> | null = null;
    vi.stubGlobal(
      'fetch',
      vi.fn(async (url: string) => {
        // Each list also asks for a first page: a small collection's, shown by nobody.
        if (url.endsWith('limit=500')) return new Response(JSON.stringify({ metadata: {}, items: [] }));
        urls.push(url);
        const r = responses[i++];
        if (!r) {
          informer?.stop();
          return new Promise<Response>(() => undefined);
        }
        return r();
      }),
    );
    const replaced: string[][] = [];
    const events: string[] = [];
    const sink: InformerSink<KubeObject> = {
      replace: (items, complete) => complete && replaced.push(items.map((x) => x.metadata.name ?? '')),
      event: (e) => events.push(`${e.type} ${e.object.metadata.name}`),
      error: () => undefined,
    };
    informer = new Informer('/x', sink);
    informer.start();
    // The second watch ends at once, so the informer pauses a second before the next one.
    await vi.waitFor(() => expect(i).toBeGreaterThanOrEqual(5), { timeout: 3000 });
    expect(replaced).toEqual([['a'], ['a', 'b']]);
    expect(events).toEqual(['DELETED a']);
    expect(urls[3]).toContain('resourceVersion=7');
  });

  it('stops for good on 403', async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(async () => new Response(JSON.stringify({ kind: 'Status', code: 403, message: 'forbidden' }), { status: 403 })),
    );
    const errors: [number | undefined, boolean][] = [];
    const informer = new Informer('/x', {
      replace: () => undefined,
      event: () => undefined,
      error: (e, fatal) => errors.push([(e as { code?: number }).code, fatal]),
    });
    informer.start();
    await vi.waitFor(() => expect(errors).toEqual([[403, true]]));
  });
});
