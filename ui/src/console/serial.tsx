// The serial console: xterm.js over the VMI's console websocket (raw bytes both ways).
import { Button, FlexItem } from '@patternfly/react-core';
import type { Terminal } from '@xterm/xterm';
import { useEffect, useRef, useState } from 'react';
import { consoleSocketUrl } from '../api/paths';
import { readClipboard } from '../components/clipboard';
import { useNotify } from '../state/notify';
import { ConnectionBar, type ConnState } from './ConnectionBar';

export const SUBPROTOCOL = 'plain.kubevirt.io';

/** xterm.js loads when a serial console first opens, not with the VM list. */
const loadXterm = () => Promise.all([import('@xterm/xterm'), import('@xterm/addon-fit')]);

export function SerialConsole({ namespace, name }: { namespace: string; name: string }) {
  const box = useRef<HTMLDivElement>(null);
  const term = useRef<Terminal | null>(null);
  const socket = useRef<WebSocket | null>(null);
  const [state, setState] = useState<ConnState>('connecting');
  const [detail, setDetail] = useState('');
  const [attempt, setAttempt] = useState(0);
  // The terminal exists: the socket opens only then, so no early output is lost.
  const [ready, setReady] = useState(false);
  const notify = useNotify();

  // One terminal for the life of the view; keystrokes go to whichever socket is open.
  useEffect(() => {
    let gone = false;
    let dispose: (() => void) | undefined;
    loadXterm().then(
      ([{ Terminal }, { FitAddon }]) => {
        if (gone || !box.current) return;
        dispose = openTerminal(box.current, Terminal, FitAddon);
        setReady(true);
      },
      (e: Error) => {
        if (gone) return;
        setState('disconnected');
        setDetail(`The terminal could not be loaded: ${e.message}`);
      },
    );
    return () => {
      gone = true;
      dispose?.();
    };
  }, []);

  /** Opens xterm in `box`, wired to the socket; returns what closes it. */
  function openTerminal(
    box: HTMLDivElement,
    Terminal: typeof import('@xterm/xterm').Terminal,
    FitAddon: typeof import('@xterm/addon-fit').FitAddon,
  ): () => void {
    const t = new Terminal({
      cursorBlink: true,
      scrollback: 5000,
      fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace',
      fontSize: 14,
      theme: { background: '#000000' },
    });
    const fit = new FitAddon();
    t.loadAddon(fit);
    t.open(box);
    const refit = () => {
      try {
        fit.fit();
      } catch {
        // Not laid out yet (hidden tab).
      }
    };
    refit();
    const ro = new ResizeObserver(refit);
    ro.observe(box);
    const enc = new TextEncoder();
    const send = (data: Uint8Array) => {
      const ws = socket.current;
      if (ws && ws.readyState === WebSocket.OPEN) ws.send(data);
    };
    const d1 = t.onData((s) => send(enc.encode(s)));
    const d2 = t.onBinary((s) => send(Uint8Array.from(s, (c) => c.charCodeAt(0) & 0xff)));
    term.current = t;
    t.focus();
    return () => {
      d1.dispose();
      d2.dispose();
      ro.disconnect();
      t.dispose();
      term.current = null;
    };
  }

  useEffect(() => {
    if (!ready) return;
    let live = true;
    setState('connecting');
    setDetail('');
    const ws = new WebSocket(consoleSocketUrl(namespace, name, 'console'), SUBPROTOCOL);
    ws.binaryType = 'arraybuffer';
    socket.current = ws;
    ws.onopen = () => {
      if (!live) return;
      setState('connected');
      term.current?.focus();
    };
    ws.onmessage = (ev: MessageEvent<ArrayBuffer | string>) => {
      const t = term.current;
      if (!t) return;
      if (typeof ev.data === 'string') t.write(ev.data);
      else t.write(new Uint8Array(ev.data));
    };
    ws.onclose = (ev) => {
      if (!live) return;
      setState('disconnected');
      // Another viewer taking over closes this socket; the reason says so when given.
      setDetail(ev.reason || (ev.code === 1000 ? '' : `Connection closed (code ${ev.code}).`));
      term.current?.write('\r\n\x1b[31m[Disconnected]\x1b[0m\r\n');
    };
    return () => {
      live = false;
      ws.onclose = null;
      ws.close();
      if (socket.current === ws) socket.current = null;
    };
  }, [namespace, name, attempt, ready]);

  const paste = async () => {
    try {
      const text = await readClipboard();
      const ws = socket.current;
      if (!ws || ws.readyState !== WebSocket.OPEN) throw new Error('The console is not connected.');
      ws.send(new TextEncoder().encode(text));
      term.current?.focus();
    } catch (e) {
      notify('danger', 'Paste failed', (e as Error).message);
    }
  };

  return (
    <>
      <ConnectionBar state={state} detail={detail} onReconnect={() => setAttempt((a) => a + 1)}>
        <FlexItem>
          <Button variant="secondary" size="sm" onClick={() => void paste()} isAriaDisabled={state !== 'connected'}>
            Paste
          </Button>
        </FlexItem>
      </ConnectionBar>
      <div
        ref={box}
        className="vp-console"
        role="region"
        aria-label="Serial console"
        onClick={() => term.current?.focus()}
      />
    </>
  );
}
