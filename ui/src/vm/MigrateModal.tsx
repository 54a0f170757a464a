// Choose where a live migration goes: anywhere the scheduler likes, or one node.
import {
  Button,
  Form,
  FormGroup,
  FormHelperText,
  FormSelect,
  FormSelectOption,
  HelperText,
  HelperTextItem,
  Modal,
  ModalBody,
  ModalFooter,
  ModalHeader,
  TextInput,
} from '@patternfly/react-core';
import { useState } from 'react';
import { paths } from '../api/paths';
import type { Node } from '../api/types';
import { ErrorAlert } from '../components/ErrorAlert';
import { nodeReady } from '../nodes/nodeState';
import { useList } from '../state/informers';

export function MigrateModal({
  vmName,
  currentNode,
  onMigrate,
  onClose,
}: {
  vmName: string;
  currentNode?: string;
  onMigrate: (node: string | undefined) => Promise<void>;
  onClose: () => void;
}) {
  const nodes = useList<Node>(paths.nodes());
  const [target, setTarget] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const candidates = [...nodes.items.values()]
    .filter((n) => n.metadata.name !== currentNode)
    .sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));

  const submit = async () => {
    setBusy(true);
    setError(null);
    try {
      await onMigrate(target.trim() || undefined);
      onClose();
    } catch (e) {
      setError(e);
      setBusy(false);
    }
  };

  return (
    <Modal isOpen variant="small" onClose={onClose} aria-labelledby="migrate-modal-title">
      <ModalHeader title="Migrate" labelId="migrate-modal-title" description={`Live-migrate ${vmName} to another node.`} />
      <ModalBody>
        <Form
          onSubmit={(e) => {
            e.preventDefault();
            void submit();
          }}
        >
          <FormGroup label="Target node" fieldId="migrate-target">
            {nodes.fatal ? (
              <>
                <TextInput id="migrate-target" value={target} placeholder="Automatic" onChange={(_e, v) => setTarget(v)} />
                <FormHelperText>
                  <HelperText>
                    <HelperTextItem>Nodes cannot be listed; leave empty for automatic placement.</HelperTextItem>
                  </HelperText>
                </FormHelperText>
              </>
            ) : (
              <FormSelect id="migrate-target" value={target} onChange={(_e, v) => setTarget(v)}>
                <FormSelectOption value="" label="Automatic" />
                {candidates.map((n) => {
                  const ok = nodeReady(n) && !n.spec?.unschedulable;
                  const name = n.metadata.name ?? '';
                  return (
                    <FormSelectOption
                      key={name}
                      value={name}
                      label={ok ? name : `${name} (${n.spec?.unschedulable ? 'cordoned' : 'not ready'})`}
                      isDisabled={!ok}
                    />
                  );
                })}
              </FormSelect>
            )}
          </FormGroup>
        </Form>
        <ErrorAlert error={error} />
      </ModalBody>
      <ModalFooter>
        <Button variant="primary" onClick={() => void submit()} isLoading={busy} isDisabled={busy}>
          Migrate
        </Button>
        <Button variant="link" onClick={onClose}>
          Cancel
        </Button>
      </ModalFooter>
    </Modal>
  );
}
