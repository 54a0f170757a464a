import { describe, expect, it } from 'vitest';
import { href, matchRoute } from './router';

describe('matchRoute', () => {
  it.each([
    ['/ui', { page: 'vms' }],
    ['/ui/', { page: 'vms' }],
    ['/ui/vms', { page: 'vms' }],
    ['/ui/vms/new', { page: 'vm-new' }],
    ['/ui/vms/default/web-1', { page: 'vm', namespace: 'default', name: 'web-1', tab: undefined }],
    ['/ui/vms/default/web-1/console', { page: 'vm', namespace: 'default', name: 'web-1', tab: 'console' }],
    ['/ui/nodes', { page: 'nodes' }],
    ['/ui/migrations', { page: 'migrations' }],
    ['/ui/datavolumes', { page: 'datavolumes' }],
    ['/ui/login', { page: 'login' }],
    ['/ui/nope', { page: 'not-found', path: '/ui/nope' }],
  ])('%s', (path, route) => {
    expect(matchRoute(path)).toEqual(route);
  });

  it('round-trips names that need escaping', () => {
    expect(matchRoute(href.vm('ns', 'a b'))).toMatchObject({ namespace: 'ns', name: 'a b' });
  });
});
