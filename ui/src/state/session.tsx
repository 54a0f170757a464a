// The signed-in user, shared through context.
import { createContext, useContext } from 'react';
import type { Session } from '../api/session';

export interface SessionContextValue {
  session: Session;
  logout: () => void;
}

export const SessionContext = createContext<SessionContextValue | null>(null);

export function useSession(): SessionContextValue {
  const v = useContext(SessionContext);
  if (!v) throw new Error('useSession outside a signed-in page');
  return v;
}
