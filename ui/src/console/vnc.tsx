// The VNC screen: noVNC's RFB client over the VMI's vnc websocket.
import type RFB from '@novnc/novnc';
import { Button, FlexItem } from '@patternfly/react-core';
import { useEffect, useRef, useState } from 'react';
import { consoleSocketUrl } from '../api/paths';
import { readClipboard } from '../components/clipboard';
import { useNotify } from '../state/notify';
import { ConnectionBar, type ConnState } from './ConnectionBar';
import { textToKeystrokes, typeKeystrokes } from './keys';
import { SUBPROTOCOL } from './serial';

export function VncConsole({ namespace, name }: { namespace: string; name: string }) {
  const screen = useRef<HTMLDivElement>(null);
  const rfb = useRef<RFB | null>(null);
  const [state, setState] = useState<ConnState>('connecting');
  const [detail, setDetail] = useState('');
  const [attempt, setAttempt] = useState(0);
  const notify = useNotify();

  useEffect(() => {
    let live = true;
    let client: RFB | undefined;
    setState('connecting');
    setDetail('');
    // noVNC loads when a VNC screen first opens, not with the VM list.
    import('@novnc/novnc').then(
      ({ default: Rfb }) => {
        if (live && screen.current) client = connect(Rfb, screen.current);
      },
      (e: Error) => {
        if (!live) return;
        setState('disconnected');
        setDetail(`The VNC client could not be loaded: ${e.message}`);
      },
    );
    return () => {
      live = false;
      rfb.current = null;
      client?.disconnect();
    };
  }, [namespace, name, attempt]);

  /** Connects noVNC in `screen`; its events update the view while it is current. */
  function connect(Rfb: typeof RFB, screen: HTMLDivElement): RFB {
    const client = new Rfb(screen, consoleSocketUrl(namespace, name, 'vnc'), { wsProtocols: [SUBPROTOCOL] });
    client.scaleViewport = true;
    client.resizeSession = false;
    client.background = '#222';
    const live = () => rfb.current === client;
    client.addEventListener('connect', () => {
      if (!live()) return;
      setState('connected');
      client.focus();
    });
    client.addEventListener('disconnect', (ev: Event) => {
      if (!live()) return;
      const clean = (ev as CustomEvent<{ clean: boolean }>).detail?.clean;
      setState('disconnected');
      setDetail(clean ? '' : 'The connection was lost or taken over by another viewer.');
      rfb.current = null;
    });
    client.addEventListener('securityfailure', (ev: Event) => {
      const reason = (ev as CustomEvent<{ reason?: string }>).detail?.reason;
      if (live()) setDetail(`VNC security negotiation failed${reason ? `: ${reason}` : ''}.`);
    });
    rfb.current = client;
    return client;
  }

  const paste = async () => {
    try {
      const text = await readClipboard();
      const r = rfb.current;
      if (!r) throw new Error('The VNC screen is not connected.');
      // Typed as key presses: the guest's clipboard is not reachable over plain VNC.
      typeKeystrokes(r, textToKeystrokes(text));
      r.focus();
    } catch (e) {
      notify('danger', 'Paste failed', (e as Error).message);
    }
  };

  return (
    <>
      <ConnectionBar state={state} detail={detail} onReconnect={() => setAttempt((a) => a + 1)}>
        <FlexItem>
          <Button variant="secondary" size="sm" isAriaDisabled={state !== 'connected'} onClick={() => rfb.current?.sendCtrlAltDel()}>
            Send Ctrl-Alt-Del
          </Button>
        </FlexItem>
        <FlexItem>
          <Button variant="secondary" size="sm" isAriaDisabled={state !== 'connected'} onClick={() => void paste()}>
            Paste
          </Button>
        </FlexItem>
      </ConnectionBar>
      <div ref={screen} className="vp-vnc" role="region" aria-label="VNC screen" />
    </>
  );
}
