import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// The build goes where the Go package ui embeds it (site/dist). `npm run dev`
// serves the app with hot reload and sends the API to a converge on :8080.
export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "site/dist",
    emptyOutDir: true,
    assetsDir: "assets",
    chunkSizeWarningLimit: 1024,
  },
  server: {
    proxy: { "/api": "http://127.0.0.1:8080" },
  },
});
