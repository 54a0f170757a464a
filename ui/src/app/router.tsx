// A small History-API router: the app lives under /ui, paths are matched by hand.
import { useSyncExternalStore, type AnchorHTMLAttributes, type MouseEvent } from 'react';

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

export const href = {
  vms: () => `${BASE}/vms`,
  vmNew: (ns?: string) => `${BASE}/vms/new${ns ? `?namespace=${encodeURIComponent(ns)}` : ''}`,
  vm: (ns: string, name: string, tab?: string) =>
    `${BASE}/vms/${encodeURIComponent(ns)}/${encodeURIComponent(name)}${tab ? `/${tab}` : ''}`,
  migrations: () => `${BASE}/migrations`,
  nodes: () => `${BASE}/nodes`,
  datavolumes: () => `${BASE}/datavolumes`,
  login: () => `${BASE}/login`,
};

const listeners = new Set<() => void>();
const notify = () => listeners.forEach((fn) => fn());

if (typeof window !== 'undefined') window.addEventListener('popstate', notify);

export function navigate(to: string, opts: { replace?: boolean } = {}): void {
  if (to === window.location.pathname + window.location.search) return;
  if (opts.replace) window.history.replaceState(null, '', to);
  else window.history.pushState(null, '', to);
  window.scrollTo?.(0, 0);
  notify();
}

function subscribe(fn: () => void) {
  listeners.add(fn);
  return () => {
    listeners.delete(fn);
  };
}

/** The current path + query string, re-rendering on navigation. */
export function useLocation(): { pathname: string; search: string } {
  const full = useSyncExternalStore(subscribe, () => window.location.pathname + window.location.search);
  const q = full.indexOf('?');
  return q < 0 ? { pathname: full, search: '' } : { pathname: full.slice(0, q), search: full.slice(q) };
}

/** Client-side navigation for plain left clicks; others (new tab, etc.) stay native. */
export function onLinkClick(e: MouseEvent<HTMLElement>, to: string): void {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  navigate(to);
}

export function Link({ to, children, ...rest }: AnchorHTMLAttributes<HTMLAnchorElement> & { to: string }) {
  return (
    <a href={to} onClick={(e) => onLinkClick(e, to)} {...rest}>
      {children}
    </a>
  );
}
