// Text to X11 keysyms for typing a paste into the VNC screen. The guest sees key
// presses, not text, so shifted characters need Shift held (US layout).

export const XK_SHIFT_L = 0xffe1;
export const XK_RETURN = 0xff0d;
export const XK_TAB = 0xff09;
export const XK_BACKSPACE = 0xff08;
export const XK_ESCAPE = 0xff1b;

const SHIFTED = new Set('~!@#$%^&*()_+{}|:"<>?');

export interface KeyStroke {
  keysym: number;
  shift: boolean;
}

/** The keysym of one character (Latin-1 maps to itself, the rest to 0x01000000+U). */
export function charKeysym(ch: string): number | null {
  const cp = ch.codePointAt(0);
  if (cp === undefined) return null;
  if (ch === '\n' || ch === '\r') return XK_RETURN;
  if (ch === '\t') return XK_TAB;
  if (ch === '\b') return XK_BACKSPACE;
  if (ch === '\x1b') return XK_ESCAPE;
  if (cp < 0x20 || cp === 0x7f) return null;
  if (cp <= 0xff) return cp;
  return 0x01000000 + cp;
}

export function textToKeystrokes(text: string): KeyStroke[] {
  const out: KeyStroke[] = [];
  // "\r\n" is one Enter, not two.
  const normalized = text.replace(/\r\n/g, '\n');
  for (const ch of normalized) {
    const keysym = charKeysym(ch);
    if (keysym === null) continue;
    const shift = (ch >= 'A' && ch <= 'Z') || SHIFTED.has(ch);
    out.push({ keysym, shift });
  }
  return out;
}

export interface KeySender {
  sendKey(keysym: number, code: string | null, down?: boolean): void;
}

/** Types the strokes: press Shift around shifted characters. */
export function typeKeystrokes(rfb: KeySender, strokes: KeyStroke[]): void {
  for (const s of strokes) {
    if (s.shift) rfb.sendKey(XK_SHIFT_L, null, true);
    rfb.sendKey(s.keysym, null, true);
    rfb.sendKey(s.keysym, null, false);
    if (s.shift) rfb.sendKey(XK_SHIFT_L, null, false);
  }
}
