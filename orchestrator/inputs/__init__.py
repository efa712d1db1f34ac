"""What a user gives the project, read and refused alike everywhere: the parser every command starts from (``parser``)
and the one-line errors for bad values (``validation``)."""
