//! The GLUE 2.0 information provider: publishes a site's CDERs to the BDII.
