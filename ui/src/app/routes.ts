// The console's pages and how a pathname maps to one; no React here, so the early
// requests script (boot/early.ts) can read the route before the app has loaded.

export const BASE = '/ui';

export type Route =
  | { page: 'login' }
  | { page: 'vms' }
  | { page: 'vm-new' }
  | { page: 'vm'; namespace: string; name: string; tab?: string }
  | { page: 'migrations' }
  | { page: 'nodes' }
  | { page: 'datavolumes' }
  | { page: 'not-found'; path: string };

/** Maps a browser pathname (with the /ui prefix) to a page. */
export function matchRoute(pathname: string): Route {
  let p = pathname;
  if (p === BASE || p.startsWith(BASE + '/')) p = p.slice(BASE.length);
  const parts = p.split('/').filter(Boolean).map(safeDecode);
  if (parts.length === 0) return { page: 'vms' };
  const [head, ...rest] = parts;
  switch (head) {
    case 'login':
      return { page: 'login' };
    case 'vms':
      if (rest.length === 0) return { page: 'vms' };
      if (rest.length === 1 && rest[0] === 'new') return { page: 'vm-new' };
      if (rest.length === 2 || rest.length === 3)
        return { page: 'vm', namespace: rest[0], name: rest[1], tab: rest[2] };
      break;
    case 'migrations':
    case 'nodes':
    case 'datavolumes':
      if (rest.length === 0) return { page: head };
      break;
  }
  return { page: 'not-found', path: pathname };
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
