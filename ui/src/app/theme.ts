// Light/dark theme: PatternFly's dark theme is a class on <html>. The choice is kept
// in localStorage; without one we follow the system preference.

export type Theme = 'light' | 'dark';

const KEY = 'virtplane-theme';
export const DARK_CLASS = 'pf-v6-theme-dark';

export function storedTheme(storage: Pick<Storage, 'getItem'> | undefined = safeStorage()): Theme | null {
  const v = storage?.getItem(KEY);
  return v === 'dark' || v === 'light' ? v : null;
}

export function initialTheme(): Theme {
  const stored = storedTheme();
  if (stored) return stored;
  const dark = typeof matchMedia === 'function' && matchMedia('(prefers-color-scheme: dark)').matches;
  return dark ? 'dark' : 'light';
}

export function applyTheme(theme: Theme, root: HTMLElement = document.documentElement): void {
  root.classList.toggle(DARK_CLASS, theme === 'dark');
}

export function saveTheme(theme: Theme): void {
  try {
    safeStorage()?.setItem(KEY, theme);
  } catch {
    // Storage can be full or disabled; the theme still applies for this page.
  }
}

function safeStorage(): Storage | undefined {
  try {
    return typeof localStorage === 'undefined' ? undefined : localStorage;
  } catch {
    return undefined;
  }
}
