// Clipboard access with a fallback for browsers that refuse the async API.

export async function copyText(text: string): Promise<void> {
  if (navigator.clipboard?.writeText) {
    try {
      await navigator.clipboard.writeText(text);
      return;
    } catch {
      // Permission refused: fall through to the old way.
    }
  }
  const ta = document.createElement('textarea');
  ta.value = text;
  ta.setAttribute('readonly', '');
  ta.style.position = 'fixed';
  ta.style.opacity = '0';
  document.body.appendChild(ta);
  ta.select();
  const ok = document.execCommand('copy');
  ta.remove();
  if (!ok) throw new Error('The browser did not allow copying to the clipboard.');
}

export async function readClipboard(): Promise<string> {
  if (!navigator.clipboard?.readText) throw new Error('This browser does not let pages read the clipboard.');
  return navigator.clipboard.readText();
}
