// The signed-in frame: masthead (product, user, theme, log out) and the sidebar nav.
import {
  Button,
  Masthead,
  MastheadBrand,
  MastheadContent,
  MastheadLogo,
  MastheadMain,
  MastheadToggle,
  Nav,
  NavItem,
  NavList,
  Page,
  PageSidebar,
  PageSidebarBody,
  PageToggleButton,
  SkipToContent,
  Toolbar,
  ToolbarContent,
  ToolbarGroup,
  ToolbarItem,
} from '@patternfly/react-core';
import MoonIcon from '@patternfly/react-icons/dist/esm/icons/moon-icon';
import SunIcon from '@patternfly/react-icons/dist/esm/icons/sun-icon';
import { useState, type MouseEvent, type ReactNode } from 'react';
import { useSession } from '../state/session';
import { href, onLinkClick } from './router';
import { applyTheme, initialTheme, saveTheme, type Theme } from './theme';

const NAV = [
  { to: href.vms(), label: 'Virtual machines' },
  { to: href.migrations(), label: 'Migrations' },
  { to: href.nodes(), label: 'Nodes' },
  { to: href.datavolumes(), label: 'DataVolumes' },
];

const MAIN_ID = 'vp-main';

export function Shell({ pathname, children }: { pathname: string; children: ReactNode }) {
  const { session, logout } = useSession();
  const [theme, setTheme] = useState<Theme>(initialTheme);
  const [sidebarOpen, setSidebarOpen] = useState(true);
  const [mobile, setMobile] = useState(false);

  const toggleTheme = () => {
    const next: Theme = theme === 'dark' ? 'light' : 'dark';
    applyTheme(next);
    saveTheme(next);
    setTheme(next);
  };

  const masthead = (
    <Masthead>
      <MastheadMain>
        <MastheadToggle>
          <PageToggleButton
            isHamburgerButton
            aria-label="Global navigation"
            isSidebarOpen={sidebarOpen}
            onSidebarToggle={() => setSidebarOpen((o) => !o)}
          />
        </MastheadToggle>
        <MastheadBrand>
          <MastheadLogo href={href.vms()} onClick={(e: MouseEvent<HTMLElement>) => onLinkClick(e, href.vms())}>
            <span className="vp-brand">virtplane</span>
          </MastheadLogo>
        </MastheadBrand>
      </MastheadMain>
      <MastheadContent>
        <Toolbar isFullHeight isStatic>
          <ToolbarContent>
            <ToolbarGroup align={{ default: 'alignEnd' }} gap={{ default: 'gapSm' }} alignItems="center">
              <ToolbarItem>
                <Button
                  variant="plain"
                  aria-label="Toggle dark theme"
                  aria-pressed={theme === 'dark'}
                  onClick={toggleTheme}
                  icon={theme === 'dark' ? <SunIcon /> : <MoonIcon />}
                />
              </ToolbarItem>
              <ToolbarItem>
                <span className="vp-user" title={(session.user.groups ?? []).join(', ')}>
                  {session.user.username}
                </span>
              </ToolbarItem>
              <ToolbarItem>
                <Button variant="secondary" size="sm" onClick={logout}>
                  Log out
                </Button>
              </ToolbarItem>
            </ToolbarGroup>
          </ToolbarContent>
        </Toolbar>
      </MastheadContent>
    </Masthead>
  );

  const sidebar = (
    <PageSidebar isSidebarOpen={sidebarOpen}>
      <PageSidebarBody>
        <Nav aria-label="Main">
          <NavList>
            {NAV.map((n) => (
              <NavItem
                key={n.to}
                to={n.to}
                isActive={pathname === n.to || pathname.startsWith(n.to + '/')}
                onClick={(e) => {
                  // PF types this as a form event; it is the anchor's click.
                  onLinkClick(e as unknown as MouseEvent<HTMLElement>, n.to);
                  // On a phone the sidebar covers the page: close it after choosing.
                  if (mobile) setSidebarOpen(false);
                }}
              >
                {n.label}
              </NavItem>
            ))}
          </NavList>
        </Nav>
      </PageSidebarBody>
    </PageSidebar>
  );

  return (
    <Page
      masthead={masthead}
      sidebar={sidebar}
      mainContainerId={MAIN_ID}
      skipToContent={<SkipToContent href={`#${MAIN_ID}`}>Skip to content</SkipToContent>}
      onPageResize={(_e, { mobileView }: { mobileView: boolean }) => {
        if (mobileView !== mobile) {
          setMobile(mobileView);
          setSidebarOpen(!mobileView);
        }
      }}
    >
      {children}
    </Page>
  );
}
