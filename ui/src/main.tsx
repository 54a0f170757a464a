// Entry point: styles, the theme (before the first paint), and the app.
import '@patternfly/react-core/dist/styles/base.css';
import '@xterm/xterm/css/xterm.css';
import 'uplot/dist/uPlot.min.css';
import './app.css';
import { createRoot } from 'react-dom/client';
import { App } from './app/App';
import { applyTheme, initialTheme } from './app/theme';

applyTheme(initialTheme());

const root = document.getElementById('root');
if (root) createRoot(root).render(<App />);
