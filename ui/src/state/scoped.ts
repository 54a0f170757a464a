// A list that is cluster-wide when it may be, and falls back to one namespace on 403.
import { useEffect } from 'react';
import { ApiError } from '../api/status';
import type { KubeObject } from '../api/types';
import { useList } from './informers';
import { useNamespace } from './namespace';
import type { StoreSnapshot } from './store';

export const FALLBACK_NAMESPACE = 'default';

export function useScopedList<T extends KubeObject>(
  pathFor: (namespace?: string) => string,
): StoreSnapshot<T> & { namespace: string } {
  const { namespace, setNamespace, setClusterWideDenied } = useNamespace();
  const snap = useList<T>(pathFor(namespace || undefined));
  const denied = !namespace && snap.fatal && snap.error instanceof ApiError && snap.error.code === 403;
  useEffect(() => {
    if (denied) {
      setClusterWideDenied(true);
      setNamespace(FALLBACK_NAMESPACE);
    }
  }, [denied, setClusterWideDenied, setNamespace]);
  return { ...snap, namespace };
}
