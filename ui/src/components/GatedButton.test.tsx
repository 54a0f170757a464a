import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { accessCache, can } from '../api/ssar';
import { GatedButton } from './GatedButton';

function ssarAnswer(allowed: boolean) {
  vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify({ status: { allowed } }), { status: 201 })));
}

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
  accessCache.clear();
});

describe('GatedButton', () => {
  it('is enabled when allowed and applicable', async () => {
    ssarAnswer(true);
    const onClick = vi.fn();
    render(<GatedButton attrs={can.vmAction('ns', 'vm', 'start')} onClick={onClick}>Start</GatedButton>);
    expect(screen.getByRole('button', { name: 'Start' }).getAttribute('aria-disabled')).toBe('true'); // while asking
    await waitFor(() => expect(screen.getByRole('button', { name: 'Start' }).getAttribute('aria-disabled')).not.toBe('true'));
    fireEvent.click(screen.getByRole('button', { name: 'Start' }));
    expect(onClick).toHaveBeenCalled();
  });

  it('stays visible but disabled, with a tooltip, when not allowed', async () => {
    ssarAnswer(false);
    const onClick = vi.fn();
    render(<GatedButton attrs={can.vmAction('ns', 'vm', 'stop')} onClick={onClick}>Stop</GatedButton>);
    await waitFor(() => expect(accessCache.peek(can.vmAction('ns', 'vm', 'stop'))).toBe(false));
    const b = screen.getByRole('button', { name: 'Stop' });
    expect(b.getAttribute('aria-disabled')).toBe('true');
    fireEvent.click(b);
    expect(onClick).not.toHaveBeenCalled();
    fireEvent.focus(b);
    expect(await screen.findByText('You are not allowed to stop this virtual machine.')).toBeTruthy();
  });

  it('is disabled when the action does not fit the state', async () => {
    ssarAnswer(true);
    render(
      <GatedButton attrs={can.vmAction('ns', 'vm', 'restart')} applicable={false} notApplicableReason="Not running">
        Restart
      </GatedButton>,
    );
    const b = screen.getByRole('button', { name: 'Restart' });
    await waitFor(() => expect(accessCache.peek(can.vmAction('ns', 'vm', 'restart'))).toBe(true));
    expect(b.getAttribute('aria-disabled')).toBe('true');
  });
});
