// React access to the session's permission cache.
import { useEffect, useState } from 'react';
import { accessCache, attrsKey, type ResourceAttributes } from '../api/ssar';

/** Whether the user may do `attrs`: undefined while asking; null attrs mean "nothing to ask". */
export function useAccess(attrs: ResourceAttributes | null): boolean | undefined {
  const key = attrs ? attrsKey(attrs) : '';
  const [answer, setAnswer] = useState<{ key: string; allowed: boolean } | null>(() =>
    attrs && accessCache.peek(attrs) !== undefined ? { key, allowed: accessCache.peek(attrs)! } : null,
  );
  useEffect(() => {
    if (!attrs) return;
    let live = true;
    void accessCache.check(attrs).then((allowed) => {
      if (live) setAnswer({ key, allowed });
    });
    return () => {
      live = false;
    };
    // `key` captures everything in attrs (a new object each render).
  }, [key]);
  if (!attrs) return undefined;
  if (answer?.key === key) return answer.allowed;
  return accessCache.peek(attrs);
}

/** True when every one of `list` is allowed; undefined while any is pending. */
export function useAccessAll(list: ResourceAttributes[]): boolean | undefined {
  const key = list.map(attrsKey).sort().join('\n');
  const [answer, setAnswer] = useState<{ key: string; allowed: boolean } | null>(null);
  useEffect(() => {
    let live = true;
    void Promise.all(list.map((a) => accessCache.check(a))).then((all) => {
      if (live) setAnswer({ key, allowed: all.every(Boolean) });
    });
    return () => {
      live = false;
    };
    // `key` captures the whole list.
  }, [key]);
  return answer?.key === key ? answer.allowed : undefined;
}
