import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { accessCache } from '../api/ssar';
import { NamespaceProvider } from '../state/namespace';
import { CreateVmPage } from './create';

// A label's whole text, so "Name" does not also find "Namespace".
const L = (text: string) => new RegExp(`^${text}$`);

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
  accessCache.clear();
});

function server() {
  const posts: { url: string; body: unknown }[] = [];
  vi.stubGlobal(
    'fetch',
    vi.fn(async (url: string, init: RequestInit) => {
      const body = init.body ? JSON.parse(init.body as string) : undefined;
      if (url.endsWith('/selfsubjectaccessreviews')) return new Response(JSON.stringify({ status: { allowed: true } }), { status: 201 });
      posts.push({ url, body });
      return new Response(JSON.stringify(body), { status: 201 });
    }),
  );
  return posts;
}

describe('CreateVmPage', () => {
  it('labels every field and previews the VM as you type', () => {
    server();
    render(
      <NamespaceProvider>
        <CreateVmPage initialNamespace="demo" />
      </NamespaceProvider>,
    );
    for (const label of ['Name', 'Namespace', 'CPU cores', 'Memory', 'Boot source', 'Container disk image', 'SSH public key', 'Cloud-init user', 'Network', 'Start after creation'])
      expect(screen.getByLabelText(L(label))).toBeTruthy();
    expect((screen.getByLabelText(L('CPU cores')) as HTMLInputElement).value).toBe('1');
    expect((screen.getByLabelText(L('Memory')) as HTMLInputElement).value).toBe('256Mi');
    fireEvent.change(screen.getByLabelText(L('Name')), { target: { value: 'web1' } });
    expect(screen.getByLabelText('YAML preview').textContent).toContain('kubevirt.io/vm: web1');
    fireEvent.change(screen.getByLabelText(L('Boot source')), { target: { value: 'url' } });
    expect(screen.getByLabelText(L('Image URL'))).toBeTruthy();
    expect(screen.getByLabelText(L('Disk size'))).toBeTruthy();
    fireEvent.change(screen.getByLabelText(L('Network')), { target: { value: 'none' } });
    expect(screen.getByLabelText('YAML preview').textContent).toContain('autoattachPodInterface: false');
  });

  it('creates the VM and goes to its page', async () => {
    const posts = server();
    window.history.replaceState(null, '', '/ui/vms/new');
    render(
      <NamespaceProvider>
        <CreateVmPage initialNamespace="demo" />
      </NamespaceProvider>,
    );
    fireEvent.change(screen.getByLabelText(L('Name')), { target: { value: 'web1' } });
    fireEvent.change(screen.getByLabelText(L('Container disk image')), { target: { value: 'quay.io/x/y' } });
    fireEvent.click(screen.getByLabelText(L('Start after creation')));
    const create = screen.getByRole('button', { name: 'Create' });
    await waitFor(() => expect(create.getAttribute('aria-disabled')).not.toBe('true'));
    fireEvent.click(create);
    await waitFor(() => expect(window.location.pathname).toBe('/ui/vms/demo/web1'));
    expect(posts[0].url).toBe('/apis/kubevirt.io/v1/namespaces/demo/virtualmachines');
    expect(posts[0].body).toMatchObject({ kind: 'VirtualMachine', metadata: { name: 'web1', namespace: 'demo' }, spec: { runStrategy: 'Halted' } });
  });
});
