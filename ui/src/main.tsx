import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { App } from "./App";
import { auth, loadAuthConfig } from "./api";
import { completeSignIn } from "./signin";
import "./styles.css";

// Before the first render: how the server signs in, and the end of a
// sign-in the issuer sent this tab back from.
async function start() {
  try {
    await loadAuthConfig();
    await completeSignIn();
  } catch (e) {
    auth.fail(`Sign-in failed: ${e instanceof Error ? e.message : String(e)}`);
  }
}

void start().finally(() =>
  createRoot(document.getElementById("root")!).render(
    <StrictMode>
      <App />
    </StrictMode>,
  ),
);
