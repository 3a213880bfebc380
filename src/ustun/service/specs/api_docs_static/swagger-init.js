// Starts Swagger UI on /docs. A file rather than the inline script FastAPI emits, so that the
// page runs under a Content-Security-Policy of script-src 'self'.
"use strict";
(function () {
  const url = document.currentScript.dataset.openapiUrl;
  window.addEventListener("DOMContentLoaded", function () {
    window.ui = SwaggerUIBundle({
      url: url,
      dom_id: "#swagger-ui",
      layout: "BaseLayout",
      deepLinking: true,
      showExtensions: true,
      showCommonExtensions: true,
      // No badge fetched from validator.swagger.io: the page makes no request off this server.
      validatorUrl: null,
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
    });
  });
})();
