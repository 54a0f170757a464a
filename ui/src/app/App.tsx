// Session gate and page switch.
import { Bullseye, PageSection, Spinner, Title } from '@patternfly/react-core';
import { lazy, Suspense, useCallback, useEffect, useMemo, useState } from 'react';
import { setCsrfToken, setUnauthorizedHandler } from '../api/client';
import { fetchSession, signOut, type Session } from '../api/session';
import { accessCache } from '../api/ssar';
import { stopAllInformers } from '../state/informers';
import { NamespaceProvider } from '../state/namespace';
import { NotifyProvider } from '../state/notify';
import { SessionContext } from '../state/session';
import { VmListPage } from '../vm/list';
import { LoginPage } from './LoginPage';
import { BASE, href, Link, matchRoute, navigate, useLocation, type Route } from './router';
import { Shell } from './Shell';

// The VM list is in the first script; every other page loads when first opened, so a
// new tab on the list compiles a third less (the YAML library, forms, detail tabs).
const CreateVmPage = lazy(() => import('../vm/create').then((m) => ({ default: m.CreateVmPage })));
const VmDetailPage = lazy(() => import('../vm/detail').then((m) => ({ default: m.VmDetailPage })));
const MigrationsPage = lazy(() => import('../migrations/page').then((m) => ({ default: m.MigrationsPage })));
const NodesPage = lazy(() => import('../nodes/page').then((m) => ({ default: m.NodesPage })));
const DataVolumesPage = lazy(() => import('../datavolumes/page').then((m) => ({ default: m.DataVolumesPage })));

type AuthState =
  | { kind: 'checking' }
  | { kind: 'signed-out'; notice?: string; error?: string }
  | { kind: 'signed-in'; session: Session };

function nextParam(search: string): string {
  const next = new URLSearchParams(search).get('next');
  // Only our own pages: never bounce to another origin.
  return next && next.startsWith(BASE + '/') && !next.startsWith(href.login()) ? next : href.vms();
}

export function App() {
  const { pathname, search } = useLocation();
  const route = matchRoute(pathname);
  const [auth, setAuth] = useState<AuthState>({ kind: 'checking' });

  const endSession = useCallback((notice?: string) => {
    stopAllInformers();
    accessCache.clear();
    setCsrfToken('');
    setAuth({ kind: 'signed-out', notice });
  }, []);

  useEffect(() => {
    let live = true;
    fetchSession().then(
      (s) => {
        if (!live) return;
        if (s) {
          setCsrfToken(s.csrfToken);
          setAuth({ kind: 'signed-in', session: s });
        } else setAuth({ kind: 'signed-out' });
      },
      (e: Error) => live && setAuth({ kind: 'signed-out', error: e.message }),
    );
    return () => {
      live = false;
    };
  }, []);

  useEffect(() => {
    setUnauthorizedHandler(() => endSession('Your session has ended. Sign in again.'));
    return () => setUnauthorizedHandler(null);
  }, [endSession]);

  // Keep the URL in step with the session: signed out -> /ui/login?next=..., signed in -> away from login.
  useEffect(() => {
    if (auth.kind === 'signed-out' && route.page !== 'login') {
      navigate(`${href.login()}?next=${encodeURIComponent(pathname + search)}`, { replace: true });
    } else if (auth.kind === 'signed-in' && route.page === 'login') {
      navigate(nextParam(search), { replace: true });
    }
  }, [auth.kind, route.page, pathname, search]);

  const logout = useCallback(() => {
    // Close the watches first: their requests would otherwise end in 401s that read as
    // "your session has ended".
    stopAllInformers();
    setUnauthorizedHandler(null);
    void signOut()
      .catch(() => undefined)
      .finally(() => {
        navigate(href.login(), { replace: true });
        endSession();
        setUnauthorizedHandler(() => endSession('Your session has ended. Sign in again.'));
      });
  }, [endSession]);

  const sessionValue = useMemo(
    () => (auth.kind === 'signed-in' ? { session: auth.session, logout } : null),
    [auth, logout],
  );

  if (auth.kind === 'checking') {
    return (
      <Bullseye style={{ height: '100vh' }}>
        <Spinner aria-label="Loading" />
      </Bullseye>
    );
  }
  if (auth.kind === 'signed-out' || !sessionValue) {
    return (
      <LoginPage
        notice={auth.kind === 'signed-out' ? auth.notice ?? auth.error : undefined}
        onSignedIn={(s) => {
          setCsrfToken(s.csrfToken);
          accessCache.clear();
          setAuth({ kind: 'signed-in', session: s });
        }}
      />
    );
  }
  return (
    <SessionContext.Provider value={sessionValue}>
      <NamespaceProvider>
        <NotifyProvider>
          <Shell pathname={pathname}>
            <Suspense fallback={<PageLoading />}>
              <PageFor route={route} search={search} />
            </Suspense>
          </Shell>
        </NotifyProvider>
      </NamespaceProvider>
    </SessionContext.Provider>
  );
}

function PageLoading() {
  return (
    <Bullseye style={{ minHeight: '40vh' }}>
      <Spinner aria-label="Loading the page" />
    </Bullseye>
  );
}

function PageFor({ route, search }: { route: Route; search: string }) {
  switch (route.page) {
    case 'vms':
      return <VmListPage />;
    case 'vm-new':
      return <CreateVmPage initialNamespace={new URLSearchParams(search).get('namespace') ?? undefined} />;
    case 'vm':
      return <VmDetailPage key={`${route.namespace}/${route.name}`} namespace={route.namespace} name={route.name} tab={route.tab} />;
    case 'migrations':
      return <MigrationsPage />;
    case 'nodes':
      return <NodesPage />;
    case 'datavolumes':
      return <DataVolumesPage />;
    case 'login':
      return null;
    case 'not-found':
      return (
        <PageSection>
          <Title headingLevel="h1">Page not found</Title>
          <p>
            Nothing lives at <code>{route.path}</code>. <Link to={href.vms()}>Go to the virtual machines.</Link>
          </p>
        </PageSection>
      );
  }
}
