// Toast notifications for the results of actions.
import { Alert, AlertActionCloseButton, AlertGroup } from '@patternfly/react-core';
import { createContext, useCallback, useContext, useMemo, useState, type ReactNode } from 'react';

type Variant = 'success' | 'danger' | 'warning' | 'info';

interface Toast {
  id: number;
  variant: Variant;
  title: string;
  detail?: ReactNode;
}

type Notify = (variant: Variant, title: string, detail?: ReactNode) => void;

const NotifyContext = createContext<Notify>(() => undefined);

export function useNotify(): Notify {
  return useContext(NotifyContext);
}

let nextId = 1;

export function NotifyProvider({ children }: { children: ReactNode }) {
  const [toasts, setToasts] = useState<Toast[]>([]);
  const remove = useCallback((id: number) => setToasts((t) => t.filter((x) => x.id !== id)), []);
  const notify = useCallback<Notify>((variant, title, detail) => {
    const id = nextId++;
    // Keep the last few; errors stay until closed, the rest fade.
    setToasts((t) => [...t.slice(-4), { id, variant, title, detail }]);
  }, []);
  const value = useMemo(() => notify, [notify]);
  return (
    <NotifyContext.Provider value={value}>
      {children}
      <AlertGroup isToast isLiveRegion>
        {toasts.map((t) => (
          <Alert
            key={t.id}
            variant={t.variant}
            title={t.title}
            timeout={t.variant === 'danger' ? false : 6000}
            onTimeout={() => remove(t.id)}
            actionClose={<AlertActionCloseButton onClose={() => remove(t.id)} />}
          >
            {t.detail}
          </Alert>
        ))}
      </AlertGroup>
    </NotifyContext.Provider>
  );
}
