// Deleting needs the object's name typed back: a slip of the mouse should not do it.
import {
  Button,
  Form,
  FormGroup,
  Modal,
  ModalBody,
  ModalFooter,
  ModalHeader,
  TextInput,
} from '@patternfly/react-core';
import { useState } from 'react';
import { ErrorAlert } from './ErrorAlert';

export interface DeleteModalProps {
  kind: string;
  name: string;
  namespace?: string;
  onDelete: () => Promise<void>;
  onClose: () => void;
}

export function DeleteModal({ kind, name, namespace, onDelete, onClose }: DeleteModalProps) {
  const [typed, setTyped] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const matches = typed === name;
  const submit = async () => {
    if (!matches || busy) return;
    setBusy(true);
    setError(null);
    try {
      await onDelete();
      onClose();
    } catch (e) {
      setError(e);
      setBusy(false);
    }
  };
  return (
    <Modal isOpen variant="small" onClose={onClose} aria-labelledby="delete-modal-title">
      <ModalHeader title={`Delete ${kind}?`} labelId="delete-modal-title" titleIconVariant="warning" />
      <ModalBody>
        <p>
          This deletes {kind} <strong>{name}</strong>
          {namespace ? (
            <>
              {' '}
              in namespace <strong>{namespace}</strong>
            </>
          ) : null}
          . Type its name to confirm.
        </p>
        <Form
          onSubmit={(e) => {
            e.preventDefault();
            void submit();
          }}
        >
          <FormGroup label="Name to confirm" fieldId="delete-confirm-name">
            <TextInput id="delete-confirm-name" value={typed} onChange={(_e, v) => setTyped(v)} autoFocus />
          </FormGroup>
        </Form>
        <ErrorAlert error={error} />
      </ModalBody>
      <ModalFooter>
        <Button variant="danger" onClick={() => void submit()} isDisabled={!matches || busy} isLoading={busy}>
          Delete
        </Button>
        <Button variant="link" onClick={onClose}>
          Cancel
        </Button>
      </ModalFooter>
    </Modal>
  );
}
