// A minimal AWS Lambda Runtime API client, the bootstrap the Lambda emulator tests
// run a Node handler with: `node lambda-runtime.mjs <module file> <export name>`.
// It is a test stand-in for the Node runtime's own loop (aws-lambda-ric from npm
// needs cmake and a C++ toolchain to build, which this machine does not have): it
// takes each invocation from /runtime/invocation/next, calls the handler with the
// event and a context, and posts the answer to /response, or a thrown error to
// /error as {errorMessage, errorType}.
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [file, name = "handler"] = process.argv.slice(2);
const api = process.env.AWS_LAMBDA_RUNTIME_API;
if (!file || !api) {
  process.stderr.write("usage: AWS_LAMBDA_RUNTIME_API=host:port node lambda-runtime.mjs <module> [export]\n");
  process.exit(2);
}
const base = `http://${api}/2018-06-01/runtime`;
const post = (path, body) => fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

let handler;
try {
  handler = (await import(pathToFileURL(resolve(file)).href))[name];
  if (typeof handler !== "function") throw new Error(`${file} exports no function ${name}`);
} catch (err) {
  await post("/init/error", { errorMessage: String(err?.message ?? err), errorType: "Runtime.ImportModuleError" });
  process.exit(1);
}

for (;;) {
  const next = await fetch(`${base}/invocation/next`);
  const id = next.headers.get("lambda-runtime-aws-request-id");
  const deadline = Number(next.headers.get("lambda-runtime-deadline-ms"));
  const event = await next.json();
  const context = { awsRequestId: id, getRemainingTimeInMillis: () => deadline - Date.now() };
  try {
    await post(`/invocation/${id}/response`, await handler(event, context));
  } catch (err) {
    await post(`/invocation/${id}/error`, { errorMessage: String(err?.message ?? err), errorType: err?.name ?? "Error" });
  }
}
