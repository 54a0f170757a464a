import { afterEach, describe, expect, it, vi } from 'vitest';
import { request } from './client';
import { fetchSession } from './session';
import { startEarlyGet, takeEarlyGet, takeEarlySession } from './early';

afterEach(() => {
  delete window.__virtplaneEarly;
  vi.unstubAllGlobals();
  vi.useRealTimers();
});

const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });

describe('early requests', () => {
  it('answers a GET of the same path once, then the app asks itself', async () => {
    const fetchMock = vi.fn(async () => json({ items: [{ n: 1 }] }));
    vi.stubGlobal('fetch', fetchMock);
    startEarlyGet('/apis/kubevirt.io/v1/virtualmachines', {});
    expect(fetchMock).toHaveBeenCalledTimes(1);
    await expect(request('GET', '/apis/kubevirt.io/v1/virtualmachines')).resolves.toEqual({ items: [{ n: 1 }] });
    expect(fetchMock).toHaveBeenCalledTimes(1);
    await request('GET', '/apis/kubevirt.io/v1/virtualmachines');
    expect(fetchMock).toHaveBeenCalledTimes(2);
  });

  it('is not used for another path or another method', async () => {
    const fetchMock = vi.fn(async () => json({}));
    vi.stubGlobal('fetch', fetchMock);
    startEarlyGet('/api/v1/nodes', {});
    await request('GET', '/api/v1/nodes?limit=500');
    await request('POST', '/api/v1/nodes', { body: {} });
    expect(fetchMock).toHaveBeenCalledTimes(3);
    expect(takeEarlyGet('/api/v1/nodes')).toBeDefined();
  });

  it('turns an early error answer into the same ApiError as a request of its own', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => json({ kind: 'Status', code: 403, reason: 'Forbidden', message: 'no' }, 403)));
    startEarlyGet('/api/v1/nodes', {});
    await expect(request('GET', '/api/v1/nodes')).rejects.toMatchObject({ code: 403 });
  });

  it('drops an answer nobody took', async () => {
    vi.useFakeTimers();
    vi.stubGlobal('fetch', vi.fn(async () => json({})));
    startEarlyGet('/api/v1/nodes', {});
    vi.advanceTimersByTime(31_000);
    expect(takeEarlyGet('/api/v1/nodes')).toBeUndefined();
  });

  it('gives the early session to the app once', async () => {
    const fetchMock = vi.fn(async () => json({ user: { username: 'later' }, csrfToken: 'b' }));
    vi.stubGlobal('fetch', fetchMock);
    window.__virtplaneEarly = { gets: new Map(), session: Promise.resolve(json({ user: { username: 'early' }, csrfToken: 'a' })) };
    await expect(fetchSession()).resolves.toMatchObject({ user: { username: 'early' } });
    expect(takeEarlySession()).toBeUndefined();
    await expect(fetchSession()).resolves.toMatchObject({ user: { username: 'later' } });
    expect(fetchMock).toHaveBeenCalledTimes(1);
  });
});
