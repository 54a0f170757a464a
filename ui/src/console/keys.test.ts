import { describe, expect, it } from 'vitest';
import { charKeysym, textToKeystrokes, typeKeystrokes, XK_RETURN, XK_SHIFT_L } from './keys';

describe('keysyms', () => {
  it('maps Latin-1 to itself and the rest to Unicode keysyms', () => {
    expect(charKeysym('a')).toBe(0x61);
    expect(charKeysym('é')).toBe(0xe9);
    expect(charKeysym('€')).toBe(0x01000000 + 0x20ac);
    expect(charKeysym('\n')).toBe(XK_RETURN);
    expect(charKeysym('\x01')).toBeNull();
  });

  it('marks shifted characters and folds CRLF', () => {
    expect(textToKeystrokes('aB!\r\n')).toEqual([
      { keysym: 0x61, shift: false },
      { keysym: 0x42, shift: true },
      { keysym: 0x21, shift: true },
      { keysym: XK_RETURN, shift: false },
    ]);
  });

  it('presses Shift around shifted keys', () => {
    const sent: [number, boolean | undefined][] = [];
    typeKeystrokes({ sendKey: (k, _c, d) => sent.push([k, d]) }, textToKeystrokes('A'));
    expect(sent).toEqual([
      [XK_SHIFT_L, true],
      [0x41, true],
      [0x41, false],
      [XK_SHIFT_L, false],
    ]);
  });
});
