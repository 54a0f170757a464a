// Sign-in with a bearer token (the server turns it into a session cookie).
import {
  ActionGroup,
  Alert,
  Bullseye,
  Button,
  Card,
  CardBody,
  CardTitle,
  Content,
  Form,
  FormGroup,
  FormHelperText,
  HelperText,
  HelperTextItem,
  TextInput,
  Title,
} from '@patternfly/react-core';
import { useState } from 'react';
import { signIn, type Session } from '../api/session';
import { ApiError } from '../api/status';

export function LoginPage({ onSignedIn, notice }: { onSignedIn: (s: Session) => void; notice?: string }) {
  const [token, setToken] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<{ rejected: boolean; message: string } | null>(null);

  const submit = async () => {
    if (!token.trim() || busy) return;
    setBusy(true);
    setError(null);
    try {
      const session = await signIn(token.trim());
      onSignedIn(session);
    } catch (e) {
      const rejected = e instanceof ApiError && (e.code === 401 || e.code === 403);
      setError({ rejected, message: e instanceof Error ? e.message : String(e) });
      setBusy(false);
    }
  };

  return (
    <main className="vp-login">
      <Bullseye>
        <Card className="vp-login-card">
          <CardTitle>
            <Title headingLevel="h1" size="2xl">
              virtplane
            </Title>
          </CardTitle>
          <CardBody>
            <Content component="p">Sign in to the web console with a Kubernetes bearer token.</Content>
            {notice && !error ? <Alert variant="info" isInline isPlain title={notice} /> : null}
            {error ? (
              <Alert
                variant="danger"
                isInline
                role="alert"
                title={error.rejected ? 'The token was not accepted.' : 'Signing in failed.'}
              >
                {error.message}
              </Alert>
            ) : null}
            <Form
              onSubmit={(e) => {
                e.preventDefault();
                void submit();
              }}
            >
              <FormGroup label="Token" fieldId="login-token">
                <TextInput
                  id="login-token"
                  type="password"
                  autoComplete="current-password"
                  aria-required="true"
                  value={token}
                  onChange={(_e, v) => setToken(v)}
                  validated={error?.rejected ? 'error' : 'default'}
                  autoFocus
                />
                <FormHelperText>
                  <HelperText>
                    <HelperTextItem>
                      For example the output of <code>kubectl create token NAME</code>, or the token in your kubeconfig.
                    </HelperTextItem>
                  </HelperText>
                </FormHelperText>
              </FormGroup>
              <ActionGroup>
                <Button type="submit" variant="primary" isBlock isLoading={busy} isDisabled={busy || !token.trim()}>
                  Sign in
                </Button>
              </ActionGroup>
            </Form>
          </CardBody>
        </Card>
      </Bullseye>
    </main>
  );
}
