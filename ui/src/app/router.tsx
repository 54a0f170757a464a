// A small History-API router: the app lives under /ui, paths are matched by hand.
import { useSyncExternalStore, type AnchorHTMLAttributes, type MouseEvent } from 'react';
import { BASE } from './routes';

export { BASE, matchRoute, type Route } from './routes';

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
