s/COMPILE_OPTIONS "-Xptxas=--register-usage-level=10"/COMPILE_OPTIONS ""/
