// The namespace the list pages showed last in this tab (sessionStorage), read by the app
// and by the early requests script before the app has loaded.

const KEY = 'virtplane-namespace';

export function rememberedNamespace(): string | null {
  try {
    return sessionStorage.getItem(KEY);
  } catch {
    return null;
  }
}

export function rememberNamespace(ns: string): void {
  try {
    sessionStorage.setItem(KEY, ns);
  } catch {
    // Not remembered across reloads; fine.
  }
}
