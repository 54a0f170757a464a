// The namespace the list pages show: all namespaces, or one when the user may not list
// cluster-wide (a 403 on the cluster-wide list switches to `default`).
import { createContext, useContext, useState, type ReactNode } from 'react';
import { rememberedNamespace, rememberNamespace } from './rememberedNamespace';

export const ALL_NAMESPACES = '';

interface NamespaceContextValue {
  namespace: string;
  setNamespace: (ns: string) => void;
  /** A cluster-wide list was refused: "all namespaces" is not offered any more. */
  clusterWideDenied: boolean;
  setClusterWideDenied: (v: boolean) => void;
}

const NamespaceContext = createContext<NamespaceContextValue | null>(null);

export function NamespaceProvider({ children }: { children: ReactNode }) {
  const [namespace, setNs] = useState<string>(() => rememberedNamespace() ?? ALL_NAMESPACES);
  const [clusterWideDenied, setClusterWideDenied] = useState(false);
  const setNamespace = (ns: string) => {
    setNs(ns);
    rememberNamespace(ns);
  };
  return (
    <NamespaceContext.Provider value={{ namespace, setNamespace, clusterWideDenied, setClusterWideDenied }}>
      {children}
    </NamespaceContext.Provider>
  );
}

export function useNamespace(): NamespaceContextValue {
  const v = useContext(NamespaceContext);
  if (!v) throw new Error('useNamespace outside NamespaceProvider');
  return v;
}
