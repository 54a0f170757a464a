// Bundles the console into dist/: index.html, assets/app-<hash>.js and .css (+ files
// the CSS points at). Prints each file's gzipped size and fails above the budget.
import * as esbuild from 'esbuild';
import { mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const root = dirname(fileURLToPath(import.meta.url));
const dist = join(root, 'dist');
const assets = join(dist, 'assets');
const BUDGET = 1024 * 1024; // gzipped bytes, whole dist

// PatternFly's base.css declares the Red Hat web fonts and the pficon font (~250 KB):
// drop those @font-face rules so the system font stack in app.css is used instead.
const dropWebFonts = {
  name: 'drop-web-fonts',
  setup(build) {
    build.onLoad({ filter: /@patternfly[\\/]react-core[\\/]dist[\\/]styles[\\/]base\.css$/ }, async (args) => {
      const css = await readFile(args.path, 'utf8');
      const contents = css.replace(/@font-face\s*\{[^}]*\}/g, (rule) =>
        /RedHat|pficon/.test(rule) ? '' : rule,
      );
      return { contents, loader: 'css', resolveDir: dirname(args.path) };
    });
  },
};

// esbuild keeps the CSS of every module reachable from an import, even one whose JS is
// tree-shaken away; PatternFly's package index reaches every component and so adds ~1.5 MB
// of unused CSS. This plugin turns `import { A, B } from '@patternfly/react-core'` into
// imports of just those components (PatternFly publishes the name -> module map).
const PF_BARRELS = ['@patternfly/react-core', '@patternfly/react-table'];
const narrowPatternflyImports = {
  name: 'narrow-patternfly-imports',
  setup(build) {
    const maps = new Map();
    const mapFor = async (pkg) => {
      if (!maps.has(pkg)) {
        const file = join(root, 'node_modules', pkg, 'dist', 'dynamic-modules.json');
        maps.set(pkg, JSON.parse(await readFile(file, 'utf8')));
      }
      return maps.get(pkg);
    };
    const filter = new RegExp(`^(${PF_BARRELS.map((b) => b.replace(/[/]/g, '\\/')).join('|')})$`);
    build.onResolve({ filter }, (args) => {
      if (args.namespace === 'pf-narrow' || !args.importer) return undefined;
      return { path: `${args.path}?from=${args.importer}`, namespace: 'pf-narrow', pluginData: { pkg: args.path, importer: args.importer } };
    });
    build.onLoad({ filter: /.*/, namespace: 'pf-narrow' }, async (args) => {
      const { pkg, importer } = args.pluginData;
      const source = await readFile(importer, 'utf8');
      const esc = pkg.replace(/[/]/g, '\\/');
      const names = new Set();
      let whole = new RegExp(`import\\s*\\*\\s*as\\s+\\w+\\s*from\\s*['"]${esc}['"]`).test(source);
      const named = new RegExp(`(?:import|export)\\s+(type\\s+)?\\{([^}]*)\\}\\s*from\\s*['"]${esc}['"]`, 'g');
      for (const m of source.matchAll(named)) {
        if (m[1]) continue; // import type { ... }
        for (const part of m[2].split(',')) {
          const item = part.trim();
          if (!item || item.startsWith('type ')) continue;
          names.add(item.split(/\s+as\s+/)[0].trim());
        }
      }
      const map = await mapFor(pkg);
      const byModule = new Map();
      for (const n of names) {
        const mod = map[n];
        if (!mod) whole = true;
        else byModule.set(mod, [...(byModule.get(mod) ?? []), n]);
      }
      // Anything we cannot map goes through the real index, as before.
      if (whole) return { contents: `export * from '${pkg}/dist/esm/index.js';`, resolveDir: root, loader: 'js' };
      const contents = [...byModule]
        .map(([mod, ns]) => `export { ${ns.join(', ')} } from '${pkg}/${mod}';`)
        .join('\n');
      return { contents, resolveDir: root, loader: 'js' };
    });
  },
};

await rm(dist, { recursive: true, force: true });
await mkdir(assets, { recursive: true });

const result = await esbuild.build({
  absWorkingDir: root,
  entryPoints: ['src/main.tsx'],
  bundle: true,
  minify: true,
  treeShaking: true,
  format: 'esm',
  target: 'es2020',
  // noVNC awaits at the top level of a module; every browser with ES modules and
  // es2020 that we target (Chrome/Edge 89+, Firefox 89+, Safari 15+) runs that.
  supported: { 'top-level-await': true },
  outdir: assets,
  // xterm.js, noVNC and uPlot load when a console or chart first opens (dynamic imports):
  // the VM list starts with half the script to compile.
  splitting: true,
  entryNames: 'app-[hash]',
  chunkNames: 'chunk-[hash]',
  assetNames: '[name]-[hash]',
  publicPath: '/ui/assets',
  loader: { '.woff2': 'file', '.woff': 'file', '.svg': 'file', '.png': 'file', '.jpg': 'file' },
  define: { 'process.env.NODE_ENV': '"production"' },
  legalComments: 'linked',
  metafile: true,
  logLevel: 'warning',
  plugins: [dropWebFonts, narrowPatternflyImports],
});

// The page's first script: asks for the session and the first page's lists while the app
// loads (src/boot/early.ts). A classic script, so it runs before the app's module.
const earlyBuild = await esbuild.build({
  absWorkingDir: root,
  entryPoints: ['src/boot/early.ts'],
  bundle: true,
  minify: true,
  format: 'iife',
  target: 'es2020',
  outdir: assets,
  entryNames: 'early-[hash]',
  legalComments: 'linked',
  metafile: true,
  logLevel: 'warning',
});
const earlyJs = Object.keys(earlyBuild.metafile.outputs)
  .map((p) => join(root, p))
  .find((p) => /early-[^/]+\.js$/.test(p));
if (!earlyJs) throw new Error('esbuild produced no early script');

const outputs = Object.keys(result.metafile.outputs).map((p) => join(root, p));
const js = outputs.find((p) => /app-[^/]+\.js$/.test(p));
const css = outputs.find((p) => /app-[^/]+\.css$/.test(p));
if (!js || !css) throw new Error(`esbuild produced no app js/css: ${outputs.join(', ')}`);
// esbuild also writes, beside each lazily loaded chunk, the CSS of what it imports, which
// nothing would load: it must all be in the app's stylesheet already (then the file goes),
// or the build fails.
const cssInputs = (file) => Object.keys(result.metafile.outputs[relative(root, file)].inputs);
const inApp = new Set(cssInputs(css));
for (const chunkCss of outputs.filter((p) => p.endsWith('.css') && p !== css)) {
  const missing = cssInputs(chunkCss).filter((input) => !inApp.has(input));
  if (missing.length) throw new Error(`CSS imported only by a lazily loaded module: ${missing.join(', ')}`);
  await rm(chunkCss);
  await rm(`${chunkCss}.LEGAL.txt`, { force: true });
}
const url = (p) => '/ui/' + relative(dist, p).split('\\').join('/');
// The app's own chunks are fetched at once with it, not after it has been parsed.
const preloads = result.metafile.outputs[relative(root, js)].imports
  .filter((i) => i.kind === 'import-statement')
  .map((i) => `<link rel="modulepreload" href="${url(join(root, i.path))}">`)
  .join('\n');

const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>virtplane</title>
<script src="${url(earlyJs)}"></script>
<link rel="icon" href="/ui/assets/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="${url(css)}">
${preloads}
<script type="module" src="${url(js)}"></script>
</head>
<body>
<div id="root"></div>
<noscript>The virtplane web console needs JavaScript.</noscript>
</body>
</html>
`;
await writeFile(join(dist, 'index.html'), html);
await writeFile(
  join(assets, 'favicon.svg'),
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#0066cc"/><path d="M3 4h2.2L8 10.5 10.8 4H13L9 12.5H7z" fill="#fff"/></svg>\n',
);

// Sizes: every file in dist, as `gzip -c FILE | wc -c` would count it.
async function walk(dir) {
  const out = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await walk(p)));
    else out.push(p);
  }
  return out;
}
let total = 0;
let rawTotal = 0;
const rows = [];
for (const f of (await walk(dist)).sort()) {
  const raw = (await stat(f)).size;
  const gz = gzipSync(await readFile(f), { level: 9 }).length;
  total += gz;
  rawTotal += raw;
  rows.push(`  ${relative(dist, f).padEnd(40)} ${String(raw).padStart(9)} B  ${String(gz).padStart(8)} B gzipped`);
}
console.log(`dist/\n${rows.join('\n')}`);
console.log(`total: ${rawTotal} B, ${total} B gzipped (${(total / 1024).toFixed(1)} KiB of the ${BUDGET / 1024} KiB budget)`);
if (total > BUDGET) {
  console.error(`The bundle is over budget: ${total} B gzipped > ${BUDGET} B.`);
  process.exit(1);
}
