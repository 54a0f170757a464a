// The first script of the page (a classic script, a few KB, before the app's module): it
// asks for the session at once and, when there is one, for the lists of the page being
// opened, so the server answers while the browser loads and compiles the app (~300 ms on
// a new tab). The app takes these answers instead of asking again (api/early.ts).
import { requestInit, setCsrfToken } from '../api/client';
import { earlyRequests, startEarlyGet } from '../api/early';
import { paths } from '../api/paths';
import { requestSession } from '../api/session';
import { listRequests } from '../api/watch';
import { matchRoute } from '../app/routes';
import { rememberedNamespace } from '../state/rememberedNamespace';

/** The collections a page lists first, for the namespace it shows ('' = all). */
function firstLists(pathname: string, namespace: string): string[] {
  const ns = namespace || undefined;
  switch (matchRoute(pathname).page) {
    case 'vms':
      return [paths.vms(ns), paths.vmis(ns)];
    default:
      return [];
  }
}

const early = earlyRequests();
early.session = requestSession().then(async (res) => {
  if (!res.ok) return res;
  try {
    const { csrfToken } = (await res.clone().json()) as { csrfToken?: string };
    if (!csrfToken) return res;
    setCsrfToken(csrfToken);
    // What listAll will ask for, both at once.
    for (const path of firstLists(window.location.pathname, rememberedNamespace() ?? '')) {
      const { firstPage, whole } = listRequests(path);
      startEarlyGet(firstPage, requestInit('GET'));
      startEarlyGet(whole, requestInit('GET'));
    }
  } catch {
    // The app reads the session again and says what is wrong with it.
  }
  return res;
});
