// Swagger UI over this server's /openapi.json; "Authorize" keeps the API key in this page only.
"use strict";

window.addEventListener("DOMContentLoaded", () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: false,
    validatorUrl: null,
  });
});
