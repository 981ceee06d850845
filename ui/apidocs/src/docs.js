// Renders /openapi.json with Swagger UI, everything from this origin: the
// page's Content-Security-Policy refuses any other.
window.addEventListener("load", () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    // The validator badge would send the document to validator.swagger.io.
    validatorUrl: null,
  });
});
