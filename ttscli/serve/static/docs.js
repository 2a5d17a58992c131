// Swagger UI over this server's /openapi.json; "Authorize" keeps the API key in this page only.
"use strict";

// Swagger UI plays an audio response by pointing an <audio> element at the request's URL, which
// cannot repeat a POST; marked as an attachment, it is offered as a download of the bytes received.
function audioAsDownload(response) {
  const type = response.headers && response.headers["content-type"];
  if (type && type.startsWith("audio/")) {
    response.headers["content-disposition"] = 'attachment; filename="speech.' + type.split("/")[1] + '"';
  }
  return response;
}

window.addEventListener("DOMContentLoaded", () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: false,
    validatorUrl: null,
    responseInterceptor: audioAsDownload,
  });
});
