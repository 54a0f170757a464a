// Side-effect stylesheet imports are bundled by esbuild.
declare module '*.css';
