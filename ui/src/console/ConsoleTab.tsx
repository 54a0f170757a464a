// The Console tab: serial and VNC sub-tabs, each opened only when shown and allowed.
import { Alert, Button, Tab, Tabs, TabTitleText, Tooltip } from '@patternfly/react-core';
import { useState } from 'react';
import { can, deniedText } from '../api/ssar';
import type { VirtualMachineInstance } from '../api/types';
import { useAccess } from '../state/access';
import { SerialConsole } from './serial';
import { VncConsole } from './vnc';

function Denied({ text }: { text: string }) {
  return (
    <>
      <Alert variant="warning" isInline title={text} />
      <Tooltip content={text}>
        <Button variant="primary" isAriaDisabled style={{ marginTop: 8 }}>
          Connect
        </Button>
      </Tooltip>
    </>
  );
}

export function ConsoleTab({ namespace, name, vmi }: { namespace: string; name: string; vmi?: VirtualMachineInstance }) {
  const [sub, setSub] = useState<string | number>('serial');
  const serialAttrs = can.vmiConsole(namespace, name, 'console');
  const vncAttrs = can.vmiConsole(namespace, name, 'vnc');
  const serialAllowed = useAccess(serialAttrs);
  const vncAllowed = useAccess(vncAttrs);
  const running = !!vmi && (vmi.status?.phase === 'Running' || vmi.status?.phase === 'Scheduled');

  const body = (allowed: boolean | undefined, attrs: typeof serialAttrs, view: JSX.Element) => {
    if (allowed === false) return <Denied text={deniedText(attrs)} />;
    if (!running) return <Alert variant="info" isInline title="The virtual machine is not running." />;
    if (allowed === undefined) return null;
    return view;
  };

  return (
    <Tabs activeKey={sub} onSelect={(_e, k) => setSub(k)} aria-label="Console type" isSubtab mountOnEnter unmountOnExit>
      <Tab eventKey="serial" title={<TabTitleText>Serial console</TabTitleText>}>
        <div style={{ paddingTop: 12 }}>{body(serialAllowed, serialAttrs, <SerialConsole namespace={namespace} name={name} />)}</div>
      </Tab>
      <Tab eventKey="vnc" title={<TabTitleText>VNC</TabTitleText>}>
        <div style={{ paddingTop: 12 }}>{body(vncAllowed, vncAttrs, <VncConsole namespace={namespace} name={name} />)}</div>
      </Tab>
    </Tabs>
  );
}
