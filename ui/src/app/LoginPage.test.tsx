import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LoginPage } from './LoginPage';

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe('LoginPage', () => {
  it('shows "The token was not accepted" with the server message on 401', async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(async () => new Response(JSON.stringify({ kind: 'Status', code: 401, message: 'Unauthorized: invalid bearer token' }), { status: 401 })),
    );
    const onSignedIn = vi.fn();
    render(<LoginPage onSignedIn={onSignedIn} />);
    const token = screen.getByLabelText(/Token/);
    expect(token.getAttribute('type')).toBe('password');
    fireEvent.change(token, { target: { value: 'wrong' } });
    fireEvent.click(screen.getByRole('button', { name: 'Sign in' }));
    const alert = await screen.findByRole('alert');
    expect(alert.textContent).toContain('The token was not accepted');
    expect(alert.textContent).toContain('invalid bearer token');
    expect(onSignedIn).not.toHaveBeenCalled();
  });

  it('posts the token and hands over the session', async () => {
    const session = { user: { username: 'alice', groups: ['dev'] }, csrfToken: 'c' };
    const fetchMock = vi.fn(async (_u: string, _i: RequestInit) => new Response(JSON.stringify(session), { status: 200 }));
    vi.stubGlobal('fetch', fetchMock);
    const onSignedIn = vi.fn();
    render(<LoginPage onSignedIn={onSignedIn} />);
    fireEvent.change(screen.getByLabelText(/Token/), { target: { value: ' secret ' } });
    fireEvent.click(screen.getByRole('button', { name: 'Sign in' }));
    await waitFor(() => expect(onSignedIn).toHaveBeenCalledWith(session));
    const [url, init] = fetchMock.mock.calls[0];
    expect(url).toBe('/ui/session');
    expect(init.method).toBe('POST');
    expect(JSON.parse(init.body as string)).toEqual({ token: 'secret' });
  });
});
