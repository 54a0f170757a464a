// Edit the VirtualMachine as YAML: Save PUTs it, Validate asks for a dry run.
import { ActionGroup, Alert, Button, Form, FormGroup, TextArea } from '@patternfly/react-core';
import { useEffect, useState } from 'react';
import { parse } from 'yaml';
import { api, withQuery } from '../../api/client';
import { paths } from '../../api/paths';
import { can } from '../../api/ssar';
import type { VirtualMachine } from '../../api/types';
import { ErrorAlert } from '../../components/ErrorAlert';
import { GatedButton } from '../../components/GatedButton';
import { useNotify } from '../../state/notify';
import { toYaml } from '../manifest';

/** The object as shown for editing: managedFields are noise to a reader. */
export function editableYaml(vm: VirtualMachine): string {
  const { managedFields: _dropped, ...metadata } = vm.metadata;
  return toYaml({ ...vm, metadata });
}

export function parseVmYaml(text: string): VirtualMachine {
  const obj: unknown = parse(text);
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) throw new Error('The YAML is not one object.');
  return obj as VirtualMachine;
}

export function YamlTab({ vm }: { vm: VirtualMachine }) {
  const ns = vm.metadata.namespace ?? '';
  const name = vm.metadata.name ?? '';
  const notify = useNotify();
  const [text, setText] = useState(() => editableYaml(vm));
  const [baseRv, setBaseRv] = useState(vm.metadata.resourceVersion);
  const [dirty, setDirty] = useState(false);
  const [busy, setBusy] = useState<'' | 'save' | 'validate'>('');
  const [error, setError] = useState<unknown>(null);
  const [valid, setValid] = useState(false);

  // Follow the server while the user has not typed anything.
  useEffect(() => {
    if (!dirty) {
      setText(editableYaml(vm));
      setBaseRv(vm.metadata.resourceVersion);
    }
  }, [vm, dirty]);

  const reload = () => {
    setText(editableYaml(vm));
    setBaseRv(vm.metadata.resourceVersion);
    setDirty(false);
    setError(null);
    setValid(false);
  };

  const send = async (dryRun: boolean) => {
    setError(null);
    setValid(false);
    let obj: VirtualMachine;
    try {
      obj = parseVmYaml(text);
    } catch (e) {
      setError(new Error(`The YAML cannot be read: ${(e as Error).message}`));
      return;
    }
    setBusy(dryRun ? 'validate' : 'save');
    try {
      const path = dryRun ? withQuery(paths.vm(ns, name), { dryRun: 'All' }) : paths.vm(ns, name);
      const saved = await api.put<VirtualMachine>(path, obj);
      if (dryRun) setValid(true);
      else {
        notify('success', `VirtualMachine ${name} saved`);
        setDirty(false);
        if (saved) {
          setText(editableYaml(saved));
          setBaseRv(saved.metadata.resourceVersion);
        }
      }
    } catch (e) {
      setError(e);
    } finally {
      setBusy('');
    }
  };

  const stale = dirty && baseRv !== vm.metadata.resourceVersion;
  return (
    <Form
      onSubmit={(e) => {
        e.preventDefault();
        void send(false);
      }}
    >
      {stale ? (
        <Alert variant="info" isInline title="The VirtualMachine changed on the server since you started editing.">
          Reload to see the changes (your edits will be lost), or Save to try yours; the server refuses a stale save.
        </Alert>
      ) : null}
      {error ? <ErrorAlert error={error} title="The VirtualMachine was not saved" /> : null}
      {valid ? <Alert variant="success" isInline title="The server accepts this VirtualMachine (dry run)." /> : null}
      <FormGroup label="YAML" fieldId="vm-yaml">
        <TextArea
          id="vm-yaml"
          className="vp-yaml"
          value={text}
          spellCheck={false}
          autoComplete="off"
          resizeOrientation="vertical"
          rows={28}
          onChange={(_e, v) => {
            setText(v);
            setDirty(true);
            setValid(false);
          }}
        />
      </FormGroup>
      <ActionGroup>
        <GatedButton type="submit" variant="primary" attrs={can.updateVm(ns, name)} busy={busy === 'save'}>
          Save
        </GatedButton>
        <GatedButton variant="secondary" attrs={can.updateVm(ns, name)} busy={busy === 'validate'} onClick={() => void send(true)}>
          Validate
        </GatedButton>
        <Button variant="link" onClick={reload}>
          Reload
        </Button>
      </ActionGroup>
    </Form>
  );
}
