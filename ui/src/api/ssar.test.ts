import { afterEach, describe, expect, it, vi } from 'vitest';
import { AccessCache, apiReviewer, attrsKey, can, deniedText, gate } from './ssar';

afterEach(() => vi.unstubAllGlobals());

describe('AccessCache', () => {
  it('asks once per attribute set, also for concurrent checks', async () => {
    const review = vi.fn(async () => true);
    const cache = new AccessCache(review);
    const a = can.vmAction('ns', 'vm', 'start');
    const [x, y] = await Promise.all([cache.check(a), cache.check({ ...a })]);
    expect([x, y]).toEqual([true, true]);
    await cache.check(a);
    expect(review).toHaveBeenCalledTimes(1);
    expect(cache.peek(a)).toBe(true);
    await cache.check(can.vmAction('ns', 'vm', 'stop'));
    expect(review).toHaveBeenCalledTimes(2);
  });

  it('does not cache a failed review, and reads it as allowed', async () => {
    let fail = true;
    const review = vi.fn(async () => {
      if (fail) throw new Error('boom');
      return false;
    });
    const cache = new AccessCache(review);
    const a = can.deleteVm('ns', 'vm');
    expect(await cache.check(a)).toBe(true);
    expect(cache.peek(a)).toBeUndefined();
    fail = false;
    expect(await cache.check(a)).toBe(false);
    expect(cache.peek(a)).toBe(false);
  });

  it('forgets everything on clear', async () => {
    const review = vi.fn(async () => false);
    const cache = new AccessCache(review);
    await cache.check(can.createVm('ns'));
    cache.clear();
    expect(cache.peek(can.createVm('ns'))).toBeUndefined();
  });
});

describe('apiReviewer', () => {
  it('posts a SelfSubjectAccessReview and reads status.allowed', async () => {
    const fetchMock = vi.fn(async (_u: string, _i: RequestInit) =>
      new Response(JSON.stringify({ status: { allowed: true } }), { status: 201 }),
    );
    vi.stubGlobal('fetch', fetchMock);
    expect(await apiReviewer(can.vmAction('default', 'vm1', 'start'))).toBe(true);
    const [url, init] = fetchMock.mock.calls[0];
    expect(url).toBe('/apis/authorization.k8s.io/v1/selfsubjectaccessreviews');
    expect(init.method).toBe('POST');
    expect(JSON.parse(init.body as string)).toEqual({
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SelfSubjectAccessReview',
      spec: {
        resourceAttributes: {
          group: 'subresources.kubevirt.io',
          resource: 'virtualmachines',
          subresource: 'start',
          verb: 'update',
          namespace: 'default',
          name: 'vm1',
        },
      },
    });
  });
});

describe('gate', () => {
  const a = can.vmAction('ns', 'vm', 'start');
  it('disables with the reason when denied', () => {
    expect(gate(a, false)).toEqual({ disabled: true, reason: 'You are not allowed to start this virtual machine.' });
  });
  it('denial wins over "not applicable"', () => {
    expect(gate(a, false, false, 'not running').reason).toMatch(/^You are not allowed/);
  });
  it('disables for state when allowed', () => {
    expect(gate(a, true, false, 'not running')).toEqual({ disabled: true, reason: 'not running' });
  });
  it('stays disabled (silently) while pending', () => {
    expect(gate(a, undefined)).toEqual({ disabled: true, reason: '' });
  });
  it('enables when allowed and applicable, or when nothing needs asking', () => {
    expect(gate(a, true)).toEqual({ disabled: false, reason: '' });
    expect(gate(null, undefined)).toEqual({ disabled: false, reason: '' });
  });
});

describe('deniedText', () => {
  it('names the action', () => {
    expect(deniedText(can.vmiAction('n', 'v', 'softreboot'))).toBe('You are not allowed to soft reboot this virtual machine.');
    expect(deniedText(can.deleteVm('n', 'v'))).toBe('You are not allowed to delete this virtual machine.');
    expect(deniedText(can.createVm('team'))).toBe('You are not allowed to create virtual machines in namespace team.');
    expect(deniedText(can.patchNode('n1'))).toBe('You are not allowed to cordon or uncordon this node.');
    expect(deniedText(can.vmiConsole('n', 'v', 'vnc'))).toBe('You are not allowed to open the VNC screen of this virtual machine.');
  });
  it('keys differ by every attribute', () => {
    expect(attrsKey(can.vmAction('a', 'b', 'start'))).not.toBe(attrsKey(can.vmAction('a', 'b', 'stop')));
    expect(attrsKey(can.vmAction('a', 'b', 'start'))).not.toBe(attrsKey(can.vmAction('a', 'c', 'start')));
  });
});
